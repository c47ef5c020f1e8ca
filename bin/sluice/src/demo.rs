//! The built-in demo (`sluice --demo`) and the interactive console (`unix { interactive }`).

use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use std::io::{BufRead, Write};
use std::sync::mpsc;

/// The demo's embedded configuration: a router with four pg interfaces. A 64-byte IPv4/UDP
/// stream enters on pg0 with destinations spread over three /16 routes (196,000 flows) and is
/// routed out of pg1, pg2 and pg3 (ethernet-input -> ip4-input -> ip4-lookup -> ip4-rewrite ->
/// interface-output).
pub const DEMO_SCRIPT: &str = "\
create packet-generator interface pg0
create packet-generator interface pg1
create packet-generator interface pg2
create packet-generator interface pg3
set interface state pg0 up
set interface state pg1 up
set interface state pg2 up
set interface state pg3 up
set interface ip address pg0 10.0.0.1/24
set interface ip address pg1 10.0.1.1/24
set interface ip address pg2 10.0.2.1/24
set interface ip address pg3 10.0.3.1/24
ip neighbor pg1 10.0.1.2 02:00:00:00:01:02
ip neighbor pg2 10.0.2.2 02:00:00:00:02:02
ip neighbor pg3 10.0.3.2 02:00:00:00:03:02
ip route add 10.1.0.0/16 via 10.0.1.2
ip route add 10.2.0.0/16 via 10.0.2.2
ip route add 10.3.0.0/16 via 10.0.3.2
packet-generator new {
  name demo
  size 64-64
  node ethernet-input
  interface pg0
  data {
    IP4: 02:00:00:00:00:10 -> 02:fe:00:00:00:00
    UDP: 10.0.0.16 -> 10.1.0.1 - 10.3.253.32
    UDP: 1024 -> 53
    incrementing 18
  }
}
";

/// A running demo.
pub struct Demo {
    start: f64,
    last: f64,
    last_pkts: u64,
    seconds: f64,
    stopping: Option<f64>,
}

fn tx_packets(vm: &mut Vlib) -> u64 {
    vm.ext_mut::<sluice_vnet::Interfaces>()
        .list
        .iter()
        .map(|i| {
            i.counters
                .total(sluice_vnet::interface::counter::TX_PACKETS)
        })
        .sum()
}

fn run(vm: &mut Vlib, tree: &CommandTree<Vlib>, cmd: &str) -> String {
    match tree.execute(vm, cmd) {
        Ok(s) => s,
        Err(e) => format!("{cmd}: {e}\n"),
    }
}

impl Demo {
    /// Configures the demo graph and starts the stream.
    pub fn start(vm: &mut Vlib, tree: &CommandTree<Vlib>, seconds: f64) -> Result<Demo, String> {
        for (line, cmd) in
            sluice_cli::script::split_script(DEMO_SCRIPT).map_err(|e| e.to_string())?
        {
            tree.execute(vm, &cmd)
                .map_err(|e| format!("demo script line {line}: {e}"))?;
        }
        println!(
            "Sluice demo: IPv4 router, pg0 -> 3 routes -> pg1/pg2/pg3, 64-byte UDP, 196k flows, {} thread(s), {seconds:.0} s",
            vm.n_threads()
        );
        tree.execute(vm, "clear runtime")
            .map_err(|e| e.to_string())?;
        tree.execute(vm, "packet-generator enable")
            .map_err(|e| e.to_string())?;
        let now = vm.shared.clock.now_secs();
        Ok(Demo {
            start: now,
            last: now,
            last_pkts: 0,
            seconds,
            stopping: None,
        })
    }

    /// Whether traffic is still flowing.
    pub fn running(&self) -> bool {
        self.stopping.is_none()
    }

    /// Prints the live rate once a second; returns true when the demo is over.
    pub fn tick(&mut self, vm: &mut Vlib, tree: &CommandTree<Vlib>) -> bool {
        let now = vm.shared.clock.now_secs();
        if let Some(t) = self.stopping {
            // Let workers drain, then report.
            if now - t < 0.2 {
                return false;
            }
            let total = tx_packets(vm);
            println!(
                "\nTotal: {} packets in {:.2} s = {:.2} Mpps\n",
                total,
                t - self.start,
                total as f64 / (t - self.start) / 1e6
            );
            for c in [
                "show runtime",
                "show interface",
                "show ip fib summary",
                "show errors",
                "show buffers",
            ] {
                println!("sluice# {c}\n{}", run(vm, tree, c));
            }
            return true;
        }
        if now - self.last >= 1.0 {
            let p = tx_packets(vm);
            println!(
                "{:6.1} s  {:8.2} Mpps  {:>14} packets",
                now - self.start,
                (p - self.last_pkts) as f64 / (now - self.last) / 1e6,
                p
            );
            let _ = std::io::stdout().flush();
            self.last = now;
            self.last_pkts = p;
        }
        if now - self.start >= self.seconds {
            run(vm, tree, "packet-generator disable");
            self.stopping = Some(now);
        }
        false
    }
}

/// The interactive console: a thread reads stdin lines and the main loop executes them.
pub struct Console {
    rx: mpsc::Receiver<Option<String>>,
    tx_out: mpsc::Sender<String>,
}

impl Console {
    /// Starts the stdin reader thread.
    pub fn start(prompt: String) -> Console {
        let (tx, rx) = mpsc::channel();
        let (tx_out, rx_out) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            let mut pending = String::new();
            loop {
                print!(
                    "{}",
                    if pending.is_empty() {
                        prompt.as_str()
                    } else {
                        "... "
                    }
                );
                let _ = std::io::stdout().flush();
                let mut line = String::new();
                match stdin.lock().read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(None);
                        return;
                    }
                    Ok(_) => {}
                }
                pending.push_str(&line);
                let open = pending.matches('{').count();
                let close = pending.matches('}').count();
                if open > close {
                    continue;
                }
                if tx.send(Some(std::mem::take(&mut pending))).is_err() {
                    return;
                }
                match rx_out.recv() {
                    Ok(s) => {
                        print!("{s}");
                        if !s.is_empty() && !s.ends_with('\n') {
                            println!();
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        Console { rx, tx_out }
    }

    /// Executes what the console typed; returns true when the console asked to quit.
    pub fn serve(&self, vm: &mut Vlib, tree: &CommandTree<Vlib>) -> bool {
        match self.rx.try_recv() {
            Ok(Some(cmd)) => {
                let t = cmd.trim();
                if t == "quit" || t == "exit" {
                    return true;
                }
                let out = match crate::scripting::run_line(vm, tree, &cmd) {
                    Ok(s) => s,
                    Err(e) => format!("{e}\n"),
                };
                let _ = self.tx_out.send(out);
                false
            }
            Ok(None) => true,
            Err(mpsc::TryRecvError::Empty) => false,
            Err(mpsc::TryRecvError::Disconnected) => true,
        }
    }
}

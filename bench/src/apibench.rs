//! `sluice-apibench`: control-API measurements (a benchmark, not a test; `bench/api.sh`
//! runs it against a release daemon and reports min/median/max).
//!
//! - `codec [--n N]`: encode and decode rate of `ip_route_add_del` with the binary codec
//!   and with JSON (serde_json, the same fields), and the round-trip rate of each through a
//!   Unix socket pair (a server thread decodes every request and encodes a reply, the client
//!   pipelines): the measurement behind the choice of encoding (docs/api.md).
//! - `routes --socket S --n N [--window W] [--base A] [--next-hop A] [--del]`: N route adds
//!   (or deletes) of consecutive /32s from `base`, one request at a time (`--window 1`) or
//!   pipelined with W requests in flight. Prints seconds and routes/s. `--batch B`: B
//!   prefixes per `ip_route_add_del_multi` request (W is then in requests).
//! - `dump --socket S [--table T]`: time to dump a table's routes. Prints seconds and count.

use serde::{Deserialize, Serialize};
use sluice_api::codec::{Decode, Encode, Reader, Writer};
use sluice_api::control::{ApiHello, ApiHelloReply, MessageCrc};
use sluice_api::types::Prefix;
use sluice_api::Message;
use sluice_vnet::api::ip::{
    FibPath, IpRouteAddDel, IpRouteAddDelMulti, IpRouteAddDelMultiReply, IpRouteAddDelReply,
    IpRouteDetails, IpRouteDump,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::time::Instant;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn route(i: u32, base: u32, nh: Ipv4Addr, is_add: bool) -> IpRouteAddDel {
    IpRouteAddDel {
        is_add,
        table_id: 0,
        prefix: Prefix {
            addr: IpAddr::V4(Ipv4Addr::from(base.wrapping_add(i))),
            len: 32,
        },
        is_drop: false,
        paths: vec![FibPath {
            next_hop: IpAddr::V4(nh),
            sw_if_index: 0,
            weight: 1,
        }],
    }
}

// ---- JSON twin of ip_route_add_del ------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct JsonPath {
    next_hop: String,
    sw_if_index: u32,
    weight: u32,
}

#[derive(Serialize, Deserialize)]
struct JsonRoute {
    msg: String,
    context: u32,
    is_add: bool,
    table_id: u32,
    prefix: String,
    is_drop: bool,
    paths: Vec<JsonPath>,
}

#[derive(Serialize, Deserialize)]
struct JsonReply {
    msg: String,
    context: u32,
    retval: i32,
}

fn to_json(r: &IpRouteAddDel, context: u32) -> JsonRoute {
    JsonRoute {
        msg: IpRouteAddDel::NAME.into(),
        context,
        is_add: r.is_add,
        table_id: r.table_id,
        prefix: r.prefix.to_string(),
        is_drop: r.is_drop,
        paths: r
            .paths
            .iter()
            .map(|p| JsonPath {
                next_hop: p.next_hop.to_string(),
                sw_if_index: p.sw_if_index,
                weight: p.weight,
            })
            .collect(),
    }
}

/// What a server has to do with a JSON request: parse it into the typed message.
fn from_json(j: &JsonRoute) -> Option<IpRouteAddDel> {
    let (a, l) = j.prefix.split_once('/')?;
    Some(IpRouteAddDel {
        is_add: j.is_add,
        table_id: j.table_id,
        prefix: Prefix {
            addr: a.parse().ok()?,
            len: l.parse().ok()?,
        },
        is_drop: j.is_drop,
        paths: j
            .paths
            .iter()
            .map(|p| {
                Some(FibPath {
                    next_hop: p.next_hop.parse().ok()?,
                    sw_if_index: p.sw_if_index,
                    weight: p.weight,
                })
            })
            .collect::<Option<Vec<_>>>()?,
    })
}

fn frame(w: &mut Writer, id: u16, ctx: u32, m: &impl Encode) {
    let start = w.buf.len();
    w.bytes(&[0; 4]);
    id.encode(w);
    ctx.encode(w);
    m.encode(w);
    let n = (w.buf.len() - start - 4) as u32;
    w.buf[start..start + 4].copy_from_slice(&n.to_le_bytes());
}

/// Splits complete length-prefixed frames off `buf`, calling `f` on each body (after the
/// length); returns bytes consumed.
fn frames(buf: &[u8], mut f: impl FnMut(&[u8])) -> usize {
    let mut pos = 0;
    while buf.len() - pos >= 4 {
        let n = u32::from_le_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]) as usize;
        if buf.len() - pos < 4 + n {
            break;
        }
        f(&buf[pos + 4..pos + 4 + n]);
        pos += 4 + n;
    }
    pos
}

fn codec(args: &[String]) {
    let n: u32 = arg(args, "--n", 1_000_000);
    let nh = Ipv4Addr::new(10, 0, 0, 2);
    let msgs: Vec<IpRouteAddDel> = (0..n).map(|i| route(i, 0x1400_0000, nh, true)).collect();
    // Binary.
    let t = Instant::now();
    let mut w = Writer::new();
    for (i, m) in msgs.iter().enumerate() {
        frame(&mut w, 20, i as u32, m);
    }
    let enc = t.elapsed().as_secs_f64();
    let bin_bytes = w.buf.len();
    let t = Instant::now();
    let mut ok = 0u32;
    frames(&w.buf, |b| {
        let mut r = Reader::new(&b[6..]);
        if IpRouteAddDel::decode(&mut r).is_ok() && r.finish().is_ok() {
            ok += 1;
        }
    });
    let dec = t.elapsed().as_secs_f64();
    assert_eq!(ok, n);
    println!(
        "binary encode {:.0} ns/msg decode {:.0} ns/msg size {} B/msg",
        enc * 1e9 / n as f64,
        dec * 1e9 / n as f64,
        bin_bytes / n as usize
    );
    // JSON (length-prefixed documents).
    let t = Instant::now();
    let mut jb: Vec<u8> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let s = serde_json::to_vec(&to_json(m, i as u32)).expect("serialises");
        jb.extend_from_slice(&(s.len() as u32).to_le_bytes());
        jb.extend_from_slice(&s);
    }
    let enc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut ok = 0u32;
    frames(&jb, |b| {
        if let Ok(j) = serde_json::from_slice::<JsonRoute>(b) {
            if from_json(&j).is_some() {
                ok += 1;
            }
        }
    });
    let dec = t.elapsed().as_secs_f64();
    assert_eq!(ok, n);
    println!(
        "json encode {:.0} ns/msg decode {:.0} ns/msg size {} B/msg",
        enc * 1e9 / n as f64,
        dec * 1e9 / n as f64,
        jb.len() / n as usize
    );
    // Round trips through a socket pair: a server thread decoding requests and encoding
    // replies, a pipelining client.
    for json in [false, true] {
        let (mut a, b) = UnixStream::pair().expect("socketpair");
        let server = std::thread::spawn(move || serve_echo(b, json, n));
        let reader = a.try_clone().expect("clone");
        let t = Instant::now();
        let rd = std::thread::spawn(move || {
            let mut reader = reader;
            let mut buf = Vec::new();
            let mut tmp = vec![0u8; 1 << 20];
            let mut got = 0u32;
            while got < n {
                let k = reader.read(&mut tmp).expect("read");
                if k == 0 {
                    break;
                }
                buf.extend_from_slice(&tmp[..k]);
                let used = frames(&buf, |_| got += 1);
                buf.drain(..used);
            }
            got
        });
        let mut out = Vec::with_capacity(1 << 20);
        for (i, m) in msgs.iter().enumerate() {
            if json {
                let s = serde_json::to_vec(&to_json(m, i as u32)).expect("serialises");
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(&s);
            } else {
                let mut w = Writer { buf: out };
                frame(&mut w, 20, i as u32, m);
                out = w.buf;
            }
            if out.len() > 256 * 1024 {
                a.write_all(&out).expect("write");
                out.clear();
            }
        }
        a.write_all(&out).expect("write");
        let got = rd.join().expect("reader");
        let secs = t.elapsed().as_secs_f64();
        let _ = server.join();
        println!(
            "{} round trip {:.2} M msgs/s ({got} replies in {secs:.3} s)",
            if json { "json" } else { "binary" },
            got as f64 / secs / 1e6
        );
    }
}

fn serve_echo(mut s: UnixStream, json: bool, n: u32) {
    let mut buf = Vec::new();
    let mut tmp = vec![0u8; 1 << 20];
    let mut seen = 0u32;
    let mut out = Writer::new();
    while seen < n {
        let k = match s.read(&mut tmp) {
            Ok(0) | Err(_) => return,
            Ok(k) => k,
        };
        buf.extend_from_slice(&tmp[..k]);
        out.buf.clear();
        let used = frames(&buf, |b| {
            seen += 1;
            if json {
                let Ok(j) = serde_json::from_slice::<JsonRoute>(b) else {
                    return;
                };
                if from_json(&j).is_none() {
                    return;
                }
                let r = serde_json::to_vec(&JsonReply {
                    msg: "ip_route_add_del_reply".into(),
                    context: j.context,
                    retval: 0,
                })
                .expect("serialises");
                out.bytes(&(r.len() as u32).to_le_bytes());
                out.bytes(&r);
            } else {
                let ctx = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                let mut r = Reader::new(&b[6..]);
                if IpRouteAddDel::decode(&mut r).is_ok() {
                    frame(&mut out, 21, ctx, &IpRouteAddDelReply {});
                }
            }
        });
        buf.drain(..used);
        if s.write_all(&out.buf).is_err() {
            return;
        }
    }
}

// ---- against a daemon -----------------------------------------------------------------------

struct Conn {
    s: UnixStream,
    ids: HashMap<String, u16>,
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed (compacted when past half).
    pos: usize,
}

impl Conn {
    fn connect(path: &str) -> Conn {
        let s = UnixStream::connect(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut c = Conn {
            s,
            ids: HashMap::new(),
            buf: Vec::with_capacity(4 << 20),
            pos: 0,
        };
        let msgs = [
            (IpRouteAddDel::NAME, IpRouteAddDel::CRC),
            (IpRouteAddDelReply::NAME, IpRouteAddDelReply::CRC),
            (IpRouteAddDelMulti::NAME, IpRouteAddDelMulti::CRC),
            (IpRouteAddDelMultiReply::NAME, IpRouteAddDelMultiReply::CRC),
            (IpRouteDump::NAME, IpRouteDump::CRC),
            (IpRouteDetails::NAME, IpRouteDetails::CRC),
        ];
        let hello = ApiHello {
            client_name: "sluice-apibench".into(),
            messages: msgs
                .iter()
                .map(|&(n, crc)| MessageCrc {
                    name: n.into(),
                    crc,
                })
                .collect(),
        };
        let mut w = Writer::new();
        frame(&mut w, 0, 1, &hello);
        c.s.write_all(&w.buf).expect("hello");
        let (id, body) = c.next();
        assert_eq!(id, 1, "api_hello_reply");
        let r = ApiHelloReply::decode(&mut Reader::new(body)).expect("hello reply");
        for m in r.messages {
            let crc = msgs.iter().find(|x| x.0 == m.name).map(|x| x.1);
            assert_eq!(
                Some(m.crc),
                crc,
                "{}: CRC differs from the daemon's",
                m.name
            );
            c.ids.insert(m.name, m.id);
        }
        c
    }

    /// The next frame: its id and body (valid until the next call).
    fn next(&mut self) -> (u16, &[u8]) {
        loop {
            let b = &self.buf[self.pos..];
            if b.len() >= 4 {
                let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
                if b.len() >= 4 + n {
                    let id = u16::from_le_bytes([b[4], b[5]]);
                    let start = self.pos + 10;
                    self.pos += 4 + n;
                    return (id, &self.buf[start..self.pos]);
                }
            }
            if self.pos > self.buf.len() / 2 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            let len = self.buf.len();
            self.buf.resize(len + (1 << 20), 0);
            let k = self.s.read(&mut self.buf[len..]).expect("read");
            self.buf.truncate(len + k);
            assert!(k > 0, "the daemon closed the connection");
        }
    }
}

fn routes(args: &[String]) {
    let path: String = arg(args, "--socket", String::new());
    let n: u32 = arg(args, "--n", 100_000);
    let window: u32 = arg(args, "--window", 1).max(1);
    let base: Ipv4Addr = arg(args, "--base", Ipv4Addr::new(20, 0, 0, 0));
    let nh: Ipv4Addr = arg(args, "--next-hop", Ipv4Addr::new(10, 0, 0, 2));
    let del = args.iter().any(|a| a == "--del");
    let batch: u32 = arg(args, "--batch", 1).max(1);
    let mut c = Conn::connect(&path);
    let (id, ok_id) = if batch > 1 {
        (
            c.ids[IpRouteAddDelMulti::NAME],
            c.ids[IpRouteAddDelMultiReply::NAME],
        )
    } else {
        (c.ids[IpRouteAddDel::NAME], c.ids[IpRouteAddDelReply::NAME])
    };
    let base = u32::from(base);
    // Requests: one per route, or one per `batch` routes.
    let reqs = n.div_ceil(batch);
    let t = Instant::now();
    let (mut sent, mut done, mut errors) = (0u32, 0u32, 0u32);
    let mut w = Writer::new();
    while done < reqs {
        w.buf.clear();
        while sent < reqs && sent - done < window {
            if batch > 1 {
                let first = sent * batch;
                let last = (first + batch).min(n);
                let m = IpRouteAddDelMulti {
                    is_add: !del,
                    table_id: 0,
                    is_drop: false,
                    paths: route(0, base, nh, true).paths,
                    prefixes: (first..last)
                        .map(|i| route(i, base, nh, true).prefix)
                        .collect(),
                };
                frame(&mut w, id, sent + 1, &m);
            } else {
                frame(&mut w, id, sent + 1, &route(sent, base, nh, !del));
            }
            sent += 1;
        }
        if !w.buf.is_empty() {
            c.s.write_all(&w.buf).expect("write");
        }
        // Read what arrived (at least one reply), keeping the window half full.
        let target = if window == 1 {
            done + 1
        } else {
            (done + 1).max(sent.saturating_sub(window / 2))
        };
        while done < target {
            let (rid, _) = c.next();
            if rid != ok_id {
                errors += 1;
            }
            done += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "routes {} n {n} window {window} batch {batch} seconds {secs:.4} rate {:.0} errors {errors}",
        if del { "del" } else { "add" },
        n as f64 / secs
    );
}

fn dump(args: &[String]) {
    let path: String = arg(args, "--socket", String::new());
    let table: u32 = arg(args, "--table", 0);
    let mut c = Conn::connect(&path);
    let id = c.ids[IpRouteDump::NAME];
    let det = c.ids[IpRouteDetails::NAME];
    let mut w = Writer::new();
    let t = Instant::now();
    frame(
        &mut w,
        id,
        9,
        &IpRouteDump {
            table_id: table,
            is_ipv6: false,
        },
    );
    c.s.write_all(&w.buf).expect("write");
    let mut count = 0u64;
    loop {
        let (rid, body) = c.next();
        if rid == det {
            // Decoded, as a client would.
            let mut r = Reader::new(body);
            if IpRouteDetails::decode(&mut r).is_ok() {
                count += 1;
            }
        } else {
            break; // api_dump_end (or an error)
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!("dump routes {count} seconds {secs:.4}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("codec") => codec(&args),
        Some("routes") => routes(&args),
        Some("dump") => dump(&args),
        _ => {
            eprintln!("usage: sluice-apibench codec|routes|dump [options] (see the source header)");
            std::process::exit(2);
        }
    }
}

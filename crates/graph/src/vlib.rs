//! The main-thread context ([`Vlib`]): the registry, the main thread's graph, worker threads
//! and their mailboxes, and per-crate state (a type map: no global singletons).
//!
//! Control-plane changes reach workers as closures posted to their mailbox and run between
//! two dispatcher loops (a safe point); the caller waits for every worker to run them, which
//! is the barrier used for graph-topology changes. A post writes the worker's wake-up eventfd
//! ([`crate::wake`]), so a worker sleeping in `epoll_wait` runs it at once.

use crate::node::{Next, NodeIndex, NodeRegistration};
use crate::registry::{GraphBuilder, GraphError, Registry};
use crate::runtime::{Shared, ThreadGraph};
use sluice_buffer::{BufferPool, PoolConfig, PoolError};
use sluice_infra::clock::Clock;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A closure run on a thread's graph at a safe point.
pub type Job = Box<dyn FnOnce(&mut ThreadGraph) + Send>;

/// A closure run by the main loop with the whole runtime (see [`MainPoster`]).
pub type MainJob = Box<dyn FnOnce(&mut Vlib) + Send>;

#[derive(Default)]
struct MainQueue {
    jobs: Mutex<Vec<MainJob>>,
    flag: AtomicBool,
}

/// Posts closures from any thread to the main loop, which runs them with `&mut Vlib` at
/// its next iteration (`Vlib::run_main_once`) — how a control-plane thread of a plugin
/// (e.g. linux-cp's netlink listener) calls the same actions as the CLI without blocking
/// or locking the data path. A post wakes the main thread if it sleeps.
#[derive(Clone)]
pub struct MainPoster {
    q: Arc<MainQueue>,
    shared: Arc<Shared>,
}

impl MainPoster {
    /// Queues `f` for the main loop.
    pub fn post(&self, f: MainJob) {
        if let Ok(mut j) = self.q.jobs.lock() {
            j.push(f);
        }
        self.q.flag.store(true, Ordering::Release);
        self.shared.wake(0);
    }
}

struct Mailbox {
    jobs: Mutex<Vec<Job>>,
    flag: AtomicBool,
    stop: AtomicBool,
}

struct Worker {
    mailbox: Arc<Mailbox>,
    handle: Option<JoinHandle<()>>,
    index: usize,
    lcore: Option<usize>,
    name: String,
}

/// Thread layout (`cpu { ... }` in startup.conf).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuConfig {
    /// Core the main thread is pinned to.
    pub main_core: Option<usize>,
    /// One entry per worker: the core it is pinned to, if any.
    pub workers: Vec<Option<usize>>,
}

/// Errors creating the runtime.
#[derive(Debug, thiserror::Error)]
pub enum VlibError {
    /// The graph did not build.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The buffer pool could not be created.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A worker thread could not be started.
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    /// A thread's epoll or wake-up eventfd could not be created.
    #[error("cannot create thread wake-up fds: {0}")]
    Fds(std::io::Error),
}

/// Size of each handoff queue (entries).
pub const HANDOFF_RING: usize = 4096;

/// The main-thread context.
pub struct Vlib {
    /// The node registry (topology, counters, statistics).
    pub registry: Registry,
    /// The main thread's graph (thread 0).
    pub main: ThreadGraph,
    /// The buffer pool.
    pub pool: Arc<BufferPool>,
    /// State shared with workers.
    pub shared: Arc<Shared>,
    workers: Vec<Worker>,
    main_core: Option<usize>,
    /// Per-crate state by type: a `TypeId` is a hash already (SipHash made every `ext`
    /// lookup cost ~200 instructions, paid per line by bulk CLI scripts).
    ext: HashMap<TypeId, Box<dyn Any>, BuildHasherDefault<sluice_infra::hash::PreHashed>>,
    main_jobs: Arc<MainQueue>,
    /// Seconds (clock time) when the runtime started.
    pub start_secs: f64,
    /// Seconds (clock time) of the last `clear runtime`.
    pub runtime_cleared_secs: f64,
    /// How long [`Vlib::on_thread`] and [`Vlib::foreach_thread`] wait for a worker
    /// ([`Vlib::THREAD_WAIT`] unless [`Vlib::set_thread_wait`] changed it).
    thread_wait: Duration,
    /// The threads that did not take a topology change ([`Vlib::add_node`],
    /// [`Vlib::add_next`]) in time, each with the answer still to come of the last job
    /// posted to it by a barrier. A thread takes its jobs in order, so once that answer is
    /// in it has taken every change before; until then an arc [`Vlib::add_next`] finds
    /// waits for that answer (no new job queued behind the late one).
    late: Vec<(usize, mpsc::Receiver<()>)>,
}

/// Pins the calling thread to `core`.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Vlib {
    /// How long the main thread waits for a worker to run a closure posted to it
    /// ([`Vlib::on_thread`], [`Vlib::foreach_thread`]) before it stops waiting (the closure
    /// stays queued and may run later): the default of [`Vlib::thread_wait`].
    pub const THREAD_WAIT: Duration = Duration::from_secs(10);

    /// Builds the graph, the buffer pool and the threads.
    pub fn new(
        builder: GraphBuilder,
        cpu: &CpuConfig,
        buffers: &PoolConfig,
    ) -> Result<Vlib, VlibError> {
        Vlib::with_clock(builder, cpu, buffers, Clock::calibrate())
    }

    /// [`Vlib::new`] with a given clock (a benchmark's [`Clock::slowed`] one) instead of a
    /// freshly calibrated one.
    pub fn with_clock(
        builder: GraphBuilder,
        cpu: &CpuConfig,
        buffers: &PoolConfig,
        clock: Clock,
    ) -> Result<Vlib, VlibError> {
        let n_threads = 1 + cpu.workers.len();
        let registry = builder.build(n_threads)?;
        let pool = BufferPool::new(buffers)?;
        let shared = Arc::new(Shared::new(clock, n_threads, HANDOFF_RING).map_err(VlibError::Fds)?);
        if let Some(c) = cpu.main_core {
            if let Err(e) = pin_to_core(c) {
                log::warn!("cannot pin main thread to core {c}: {e}");
            }
        }
        let main =
            ThreadGraph::new(&registry, 0, pool.clone(), shared.clone()).map_err(VlibError::Fds)?;
        let mut workers = Vec::new();
        for (w, core) in cpu.workers.iter().enumerate() {
            let mut tg = ThreadGraph::new(&registry, w + 1, pool.clone(), shared.clone())
                .map_err(VlibError::Fds)?;
            let mailbox = Arc::new(Mailbox {
                jobs: Mutex::new(Vec::new()),
                flag: AtomicBool::new(false),
                stop: AtomicBool::new(false),
            });
            let mb = mailbox.clone();
            let core = *core;
            let name = format!("sluice_wk_{w}");
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    if let Some(c) = core {
                        if let Err(e) = pin_to_core(c) {
                            log::warn!("cannot pin worker {w} to core {c}: {e}");
                        }
                    }
                    worker_loop(&mut tg, &mb);
                })
                .map_err(VlibError::Thread)?;
            workers.push(Worker {
                mailbox,
                index: w + 1,
                handle: Some(handle),
                lcore: core,
                name,
            });
        }
        let now = shared.clock.now_secs();
        Ok(Vlib {
            registry,
            main,
            pool,
            shared,
            workers,
            main_core: cpu.main_core,
            ext: HashMap::default(),
            main_jobs: Arc::new(MainQueue::default()),
            start_secs: now,
            runtime_cleared_secs: now,
            thread_wait: Vlib::THREAD_WAIT,
            late: Vec::new(),
        })
    }

    /// Number of threads (main + workers).
    pub fn n_threads(&self) -> usize {
        1 + self.workers.len()
    }

    /// Number of worker threads.
    pub fn n_workers(&self) -> usize {
        self.workers.len()
    }

    /// Name of thread `t` (`sluice_main`, `sluice_wk_N`).
    pub fn thread_name(&self, t: usize) -> String {
        if t == 0 {
            "sluice_main".to_string()
        } else {
            self.workers
                .get(t - 1)
                .map(|w| w.name.clone())
                .unwrap_or_default()
        }
    }

    /// Core thread `t` is pinned to.
    pub fn thread_core(&self, t: usize) -> Option<usize> {
        if t == 0 {
            self.main_core
        } else {
            self.workers.get(t - 1).and_then(|w| w.lcore)
        }
    }

    /// Runs `f` on thread `t` (0: here, now) and waits for it.
    pub fn on_thread<R: Send + 'static>(
        &mut self,
        t: usize,
        f: impl FnOnce(&mut ThreadGraph) -> R + Send + 'static,
    ) -> Option<R> {
        if t == 0 {
            return Some(f(&mut self.main));
        }
        let w = self.workers.get(t - 1)?;
        let (tx, rx) = mpsc::channel();
        post(
            &self.shared,
            w,
            Box::new(move |tg| {
                let _ = tx.send(f(tg));
            }),
        );
        rx.recv_timeout(self.thread_wait).ok()
    }

    /// Runs `f` on every thread (main first) and waits for all of them: the barrier for
    /// topology changes. A worker that does not answer within [`Vlib::thread_wait`] is
    /// given up on (the change stays queued there): [`Vlib::foreach_thread_late`] names
    /// those.
    pub fn foreach_thread(&mut self, f: impl Fn(&mut ThreadGraph) + Send + Sync + 'static) {
        self.foreach_thread_late(f);
    }

    /// [`Vlib::foreach_thread`], and the threads that did not run `f` to its end within
    /// [`Vlib::thread_wait`] each (`f` stays queued on those, and runs when they take
    /// their queue: in order, after every change posted before it) or whose `f`
    /// panicked, in thread order.
    pub fn foreach_thread_late(
        &mut self,
        f: impl Fn(&mut ThreadGraph) + Send + Sync + 'static,
    ) -> Vec<usize> {
        self.barrier(f, false)
    }

    /// `f` on every thread (main first), waiting [`Vlib::thread_wait`] for each worker;
    /// the late threads, in thread order. What [`Vlib::add_next`] knows of late threads is
    /// renewed: a thread that answered has taken every change before (it is late no more);
    /// a late one's answer to wait for is now this job's (it runs after the earlier ones).
    /// With `topology`, a late thread not yet known as late becomes so.
    fn barrier(
        &mut self,
        f: impl Fn(&mut ThreadGraph) + Send + Sync + 'static,
        topology: bool,
    ) -> Vec<usize> {
        let f = Arc::new(f);
        f(&mut self.main);
        let mut waits = Vec::new();
        for w in &self.workers {
            let (tx, rx) = mpsc::channel::<()>();
            let f = f.clone();
            post(
                &self.shared,
                w,
                Box::new(move |tg| {
                    f(tg);
                    let _ = tx.send(());
                }),
            );
            waits.push(rx);
        }
        let mut late = Vec::new();
        for (rx, w) in waits.into_iter().zip(&self.workers) {
            let known = self.late.iter().position(|(t, _)| *t == w.index);
            if rx.recv_timeout(self.thread_wait).is_ok() {
                if let Some(i) = known {
                    self.late.remove(i);
                }
                continue;
            }
            late.push(w.index);
            match known {
                Some(i) => self.late[i].1 = rx,
                None if topology => self.late.push((w.index, rx)),
                None => {}
            }
        }
        late
    }

    /// A topology change's barrier: `f` on every thread, an error naming the threads that
    /// did not take it ([`GraphError::NotTaken`]). Those are remembered until their answer
    /// comes or a later barrier finds them answering (each thread takes its changes in
    /// order, so one that answers has taken the earlier ones too).
    fn topology_change(
        &mut self,
        f: impl Fn(&mut ThreadGraph) + Send + Sync + 'static,
    ) -> Result<(), GraphError> {
        let late = self.barrier(f, true);
        if late.is_empty() {
            return Ok(());
        }
        log::warn!(
            "graph: thread(s) {late:?} did not take a topology change within {:?}",
            self.thread_wait
        );
        Err(self.not_taken(late))
    }

    fn not_taken(&self, threads: Vec<usize>) -> GraphError {
        GraphError::NotTaken {
            threads,
            wait: self.thread_wait,
        }
    }

    /// Waits [`Vlib::thread_wait`] for each late thread's answer to its last barrier (a
    /// thread whose job panicked never answers): an error naming those still late.
    fn wait_late(&mut self) -> Result<(), GraphError> {
        let wait = self.thread_wait;
        self.late.retain(|(_, rx)| rx.recv_timeout(wait).is_err());
        if self.late.is_empty() {
            return Ok(());
        }
        Err(self.not_taken(self.late.iter().map(|(t, _)| *t).collect()))
    }

    /// How long [`Vlib::on_thread`] and [`Vlib::foreach_thread`] wait for each worker.
    pub fn thread_wait(&self) -> Duration {
        self.thread_wait
    }

    /// Sets how long [`Vlib::on_thread`] and [`Vlib::foreach_thread`] wait for each worker
    /// (tests shorten it; [`Vlib::THREAD_WAIT`] by default).
    pub fn set_thread_wait(&mut self, wait: Duration) {
        self.thread_wait = wait;
    }

    /// Adds (or finds) the arc `from -> to` on every thread.
    ///
    /// While any thread is late (an earlier change it did not take within
    /// [`Vlib::thread_wait`] and has not answered since), a call for an arc that exists
    /// waits up to [`Vlib::thread_wait`] for that thread's pending answer (no barrier, no
    /// job queued behind the late one) and fails with [`GraphError::NotTaken`] if it does
    /// not come; a new arc runs a barrier as always. A worker whose queued job panicked (no
    /// job catches a panic: its thread ends) never answers again: the errors are then
    /// permanent.
    pub fn add_next(&mut self, from: NodeIndex, to: NodeIndex) -> Result<Next, GraphError> {
        let before = self.registry.node(from).nexts.len();
        let next = self.registry.add_next(from, to)?;
        if self.registry.node(from).nexts.len() != before {
            let nexts = self.registry.node(from).nexts.clone();
            self.topology_change(move |tg| tg.set_nexts(from, nexts.clone()))?;
        } else if !self.late.is_empty() {
            // An arc found, but added (or a node made) while some thread did not answer:
            // it is Ok only once every thread has taken the changes before.
            self.wait_late()?;
        }
        Ok(next)
    }

    /// Adds (or finds) the arc between two nodes named.
    pub fn add_next_by_name(&mut self, from: &str, to: &str) -> Result<Next, GraphError> {
        let f = self.registry.lookup(from)?;
        let t = self.registry.lookup(to)?;
        self.add_next(f, t)
    }

    /// Adds a node at runtime and instantiates it on every thread.
    pub fn add_node(&mut self, reg: NodeRegistration) -> Result<NodeIndex, GraphError> {
        let i = self.registry.add_node(reg)?;
        let snap = self.registry.snapshot(i);
        self.topology_change(move |tg| tg.instantiate_snapshot(&snap))?;
        Ok(i)
    }

    /// One main-thread loop: handoff queues, input nodes, pending frames, process nodes,
    /// then the closures posted by [`MainPoster`]s (one relaxed load when there are none).
    pub fn run_main_once(&mut self) -> usize {
        let n = self.main.poll_handoff() + self.main.run_once();
        if self.main_jobs.flag.load(Ordering::Relaxed) {
            self.run_main_jobs();
        }
        n
    }

    /// A handle to post closures to the main loop from any thread.
    pub fn main_poster(&self) -> MainPoster {
        MainPoster {
            q: self.main_jobs.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Runs the closures posted to the main loop so far.
    pub fn run_main_jobs(&mut self) {
        self.main_jobs.flag.store(false, Ordering::Relaxed);
        let jobs = match self.main_jobs.jobs.lock() {
            Ok(mut j) => std::mem::take(&mut *j),
            Err(_) => return,
        };
        for j in jobs {
            j(self);
        }
    }

    /// Whether the main thread has polling work (else it may sleep).
    pub fn main_wants_poll(&self) -> bool {
        self.main.wants_poll()
            || self.main_jobs.flag.load(Ordering::Relaxed)
            || (0..self.n_threads()).any(|f| !self.shared.handoff[f][0].is_empty())
    }

    /// `poll-yield`: a worker's busy round (polled queues, inbound handoff or the short spin
    /// after work) that found no work calls sched_yield(2), so that processes sharing its CPU
    /// run before the next round. The main loop is the caller's (it checks its own rounds).
    pub fn set_poll_yield(&self, on: bool) {
        self.shared.poll_yield.store(on, Ordering::Relaxed);
    }

    /// Stops and joins the workers, freeing everything they hold.
    pub fn stop_workers(&mut self) {
        for w in &self.workers {
            w.mailbox.stop.store(true, Ordering::Release);
            self.shared.wake(w.index);
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                let _ = h.join();
            }
        }
        self.workers.clear();
        // Drain what workers handed to the main thread and free the main thread's queues.
        self.main.poll_handoff();
        self.main.shutdown();
    }

    /// Per-crate state of type `T`, if set.
    pub fn ext<T: 'static>(&self) -> Option<&T> {
        self.ext.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Per-crate state of type `T`, created with `Default` on first use.
    pub fn ext_mut<T: Default + 'static>(&mut self) -> &mut T {
        self.ext
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::<T>::default())
            .downcast_mut()
            .expect("type map entry has the type of its key")
    }

    /// Takes per-crate state out (to call methods that also need `&mut Vlib`); put it back
    /// with [`Vlib::put_ext`].
    pub fn take_ext<T: Default + 'static>(&mut self) -> T {
        std::mem::take(self.ext_mut::<T>())
    }

    /// Puts per-crate state back.
    pub fn put_ext<T: 'static>(&mut self, v: T) {
        self.ext.insert(TypeId::of::<T>(), Box::new(v));
    }

    /// Sets state whose type is known only by its id (configuration staged before the
    /// runtime existed); `v` must be of the type `id` names.
    pub fn put_ext_any(&mut self, id: TypeId, v: Box<dyn Any>) {
        debug_assert_eq!((*v).type_id(), id);
        self.ext.insert(id, v);
    }
}

impl Drop for Vlib {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

fn post(shared: &Shared, w: &Worker, job: Job) {
    match w.mailbox.jobs.lock() {
        Ok(mut j) => j.push(job),
        Err(p) => p.into_inner().push(job),
    }
    w.mailbox.flag.store(true, Ordering::Release);
    shared.wake(w.index);
}

/// How long a worker keeps spinning after its last polled packet or handed-off frame before
/// it sleeps (a loaded worker polls, an idle one costs almost no CPU). Work that came only
/// from interrupt-mode queues does not spin: the thread sleeps as soon as they are empty.
const IDLE_POLL_SECS: f64 = 0.002;

fn worker_loop(tg: &mut ThreadGraph, mb: &Mailbox) {
    let clock = tg.shared().clock;
    let mut last_work = clock.now_secs();
    loop {
        if mb.flag.swap(false, Ordering::AcqRel) {
            let jobs = match mb.jobs.lock() {
                Ok(mut j) => std::mem::take(&mut *j),
                Err(p) => std::mem::take(&mut *p.into_inner()),
            };
            for j in jobs {
                j(tg);
            }
        }
        if mb.stop.load(Ordering::Acquire) {
            // Hand nothing back: free everything this thread still holds.
            tg.poll_handoff();
            tg.shutdown();
            return;
        }
        let h = tg.poll_handoff();
        let n = tg.run_once();
        let now = clock.now_secs();
        if h > 0 || (n > 0 && tg.idle_poll_interval().is_some()) {
            last_work = now;
        }
        // `poll-yield` (checked only in a round without work).
        let yield_cpu = n == 0 && h == 0 && tg.shared().poll_yield.load(Ordering::Relaxed);
        if tg.wants_poll() || tg.has_inbound_handoff() {
            if yield_cpu {
                std::thread::yield_now();
            }
            continue;
        }
        if now - last_work < IDLE_POLL_SECS {
            if yield_cpu {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        if !tg.prepare_sleep() {
            continue;
        }
        if mb.flag.load(Ordering::Acquire) || mb.stop.load(Ordering::Acquire) {
            tg.wait(Some(0.0));
            continue;
        }
        tg.shared().epochs.offline(tg.thread());
        tg.wait(tg.sleep_timeout());
    }
}

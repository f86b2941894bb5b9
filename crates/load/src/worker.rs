//! One worker thread: a current-thread runtime running its share of the connections (one task
//! each, `conn::run`), with its own recorder, returned when its work is done.

use crate::record::Recorder;
use crate::sched::{Pace, RatePlan};
use crate::setup::{ProtoChoice, Setup};
use crate::shared::{Progress, Startup, Worker};
use anyhow::{Context, Result};
use loadterm_runtime::cpus::CpuSet;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one worker thread is given.
pub(crate) struct Job {
    pub setup: Arc<Setup>,
    /// Its connection slots.
    pub conns: Vec<u64>,
    /// Its share of `-n` (none with `-D`).
    pub share: Option<u64>,
    pub pace: Pace,
    /// When sending starts, when recording starts (after the warm-up), when it ends (`-D`).
    pub t0: Instant,
    pub from: Instant,
    pub until: Option<Instant>,
    /// Keep per-second histograms for `--hdr-log`.
    pub hdr_log: bool,
    /// When each step of a rate schedule starts, to record them apart (none at a constant rate).
    pub steps: Vec<Instant>,
    pub progress: Option<Arc<Progress>>,
    /// Pin the thread to this CPU.
    pub cpu: Option<usize>,
    /// `--send-grid`: open-loop wake-ups rounded up to multiples of this.
    pub send_grid: Duration,
    /// Shared by every worker: stops the run when no connection can be made.
    pub startup: Arc<Startup>,
    /// Set (to when) once the run is interrupted: the worker stops and returns what it has.
    pub stop: tokio::sync::watch::Receiver<Option<Instant>>,
}

/// Start worker thread `i`.
pub(crate) fn spawn(i: usize, job: Job) -> Result<JoinHandle<Result<Recorder>>> {
    loadterm_runtime::spawn(format!("load-{i}"), move || async move {
        if let Some(cpu) = job.cpu {
            let set = CpuSet::new(&[cpu]).and_then(|set| set.pin_current().map(|()| set));
            set.with_context(|| format!("cannot pin load thread {i} to CPU {cpu}"))?;
        }
        run(job).await
    })
    .context("cannot start a worker thread")
}

async fn run(job: Job) -> Result<Recorder> {
    // Without it open-loop sends fall back to tokio's 1 ms timer.
    if let Err(e) = crate::timer::start() {
        eprintln!("warning: no precise timer ({e}); open-loop sends may lag up to 1 ms");
    }
    crate::timer::set_grid(job.send_grid);
    let setup = job.setup;
    let endpoint = if setup.proto == ProtoChoice::H3 {
        let bind: std::net::SocketAddr = if setup.addr.is_ipv6() {
            "[::]:0".parse()?
        } else {
            "0.0.0.0:0".parse()?
        };
        Some(quinn::Endpoint::client(bind).context("QUIC client socket")?)
    } else {
        None
    };
    let rec = Recorder::new(job.t0, job.from, job.until, job.hdr_log).with_steps(job.steps);
    let w = Rc::new(Worker {
        setup,
        rec: RefCell::new(rec),
        tickets: job.share.map(Cell::new),
        deadline: job.until,
        pace: job.pace,
        start: job.t0,
        progress: job.progress,
        endpoint,
        counter: Cell::new(0),
        startup: job.startup,
        retries: RefCell::default(),
        resumed_share: Cell::new(0.0),
    });
    if let Pace::Open { plan, connections } = &w.pace {
        tokio::task::spawn_local(check_rate(w.clone(), job.from, plan.clone(), *connections));
    }
    let all = async {
        tokio::time::sleep_until(job.t0.into()).await;
        let tasks: Vec<_> = job
            .conns
            .iter()
            .map(|&c| tokio::task::spawn_local(crate::conn::run(w.clone(), c)))
            .collect();
        futures::future::join_all(tasks).await
    };
    let end = async {
        match job.until {
            Some(end) => tokio::time::sleep_until(end.into()).await,
            None => std::future::pending().await,
        }
    };
    let mut stop = job.stop;
    tokio::select! {
        _ = all => {}
        _ = end => {}
        // A sender gone means no interrupt will come: wait for the rest.
        Ok(_) = stop.wait_for(Option::is_some) => {}
    }
    if let Some(e) = &w.endpoint {
        e.close(0u32.into(), b"done");
    }
    let mut rec = w.rec.borrow().clone();
    if w.setup.proto == ProtoChoice::H3 {
        // quinn does not say how each handshake went: those that verified no certificate
        // resumed a session.
        rec.handshakes.settle_quic(crate::tls::verified());
    }
    Ok(rec)
}

/// Open loop: once a second of the measured window has answers, warn (one worker, once) if a
/// connection cannot carry its share of the rate at the latency seen: `-m` requests in flight
/// for `latency` each give at most `-m / latency` per second, and the rest would be sent late
/// and counted missed. Read from this worker's recorder, off the request path.
async fn check_rate(w: Rc<Worker>, from: Instant, plan: Arc<RatePlan>, connections: u64) {
    let mut at = from;
    for k in 1..=10 {
        at += Duration::from_secs(1);
        tokio::time::sleep_until(at.into()).await;
        let (completed, mean_us) = {
            let rec = w.rec.borrow();
            (rec.completed, rec.latency.mean())
        };
        if completed == 0 {
            continue;
        }
        let streams = w.setup.streams as f64;
        let latency = mean_us / 1e6;
        let wanted = plan.rate_at(k as f64) / connections as f64;
        let carried = streams / latency;
        if wanted > carried && w.startup.first_rate_warning() {
            let needed = (wanted * connections as f64 * latency / streams).ceil();
            eprintln!(
                "loadterm: warning: the rate needs {wanted:.0} req/s per connection, but at the \
                 latency seen ({:.2} ms mean) one connection carries at most {carried:.0} \
                 (-m {} / latency): sends will fall behind (counted late and missed); use \
                 -c {needed} or more, or a larger -m",
                latency * 1e3,
                w.setup.streams,
            );
        }
        return;
    }
}

//! Idle HTTP/1 connections on clear TCP, parked out of tokio. Once a connection has been idle for
//! `PARK_AFTER`, its task ends and its socket waits in its worker's own epoll set (a `mio::Poll`
//! that one task watches), as an entry of a slab plus its deadline; a socket that turns readable
//! gets a new task. A parked connection costs about 100 bytes of this process's memory, where a
//! task waiting on its socket costs its future (~640 bytes), tokio's registration (256) and the
//! allocator's overhead: HAProxy keeps an idle connection as little more than its fd and timer.
//!
//! Everything here is per worker thread (`thread_local!`): the workers run current-thread
//! runtimes, so a connection parks and resumes on the thread that accepted it.

use crate::shutdown::{ConnSlot, Shutdown};
use crate::stats;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use slab::Slab;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// How long an idle connection keeps its task before it is parked. Parking and resuming cost
/// about six system calls (epoll registrations moved between tokio's set and ours), negligible
/// once per second but not once per request: a connection whose requests come less than this
/// apart stays in its task.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

/// Continues serving a connection that turned readable (or at shutdown) in a task of its own;
/// its next request is awaited until the instant given.
pub(crate) type Resume = Rc<dyn Fn(TcpStream, ConnSlot, Instant)>;

struct Parked {
    sock: TcpStream,
    slot: ConnSlot,
    until: Instant,
}

/// This worker's parked connections (its parking lot) and what it needs to wake them.
struct ParkedConns {
    registry: Registry,
    parked: Slab<Parked>,
    /// Deadlines, earliest first, with their slab keys.
    deadlines: BTreeSet<(Instant, usize)>,
    /// Tells the driver that a new earliest deadline came in.
    sooner: Rc<Notify>,
    resume: Resume,
    /// Shutdown has begun (or the driver failed): parking resumes at once (the connection then
    /// waits in its task, and closes gracefully at shutdown).
    closed: bool,
}

thread_local! {
    static PARKED_CONNS: RefCell<Option<ParkedConns>> = const { RefCell::new(None) };
}

/// Start this worker thread's parking lot: its task runs until shutdown. Call from within the
/// worker's `LocalSet`.
#[allow(unsafe_code)] // tokio watches mio's epoll fd
pub(crate) fn start(shutdown: Shutdown, resume: Resume) -> io::Result<()> {
    let poll = Poll::new()?;
    let registry = poll.registry().try_clone()?;
    // SAFETY: a `Poll` owns its epoll fd, open and the same until the `Poll` is dropped.
    let poll = unsafe { AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE) }?;
    let sooner = Rc::new(Notify::new());
    PARKED_CONNS.set(Some(ParkedConns {
        registry,
        parked: Slab::new(),
        deadlines: BTreeSet::new(),
        sooner: sooner.clone(),
        resume,
        closed: false,
    }));
    tokio::task::spawn_local(drive(poll, sooner, shutdown));
    Ok(())
}

/// Park an idle connection until it turns readable or `until` passes (then it is closed).
/// After shutdown (or once the lot's epoll failed), or if the registration fails, it is resumed
/// at once instead: the caller's task is ending, and the connection must not be lost.
pub(crate) fn park(sock: TcpStream, slot: ConnSlot, until: Instant) {
    let p = Parked { sock, slot, until };
    let refused = PARKED_CONNS.with_borrow_mut(|lot| {
        // No lot: `start` failed on this thread (and said so); the connection closes.
        let lot = lot.as_mut()?;
        if lot.closed {
            return Some((p, lot.resume.clone()));
        }
        let entry = lot.parked.vacant_entry();
        let key = entry.key();
        let fd = p.sock.as_raw_fd();
        if let Err(e) = lot
            .registry
            .register(&mut SourceFd(&fd), Token(key), Interest::READABLE)
        {
            eprintln!("loadterm: cannot park an idle connection: {e}");
            return Some((p, lot.resume.clone()));
        }
        if lot.deadlines.first().is_none_or(|&(t, _)| until < t) {
            lot.sooner.notify_one();
        }
        lot.deadlines.insert((until, key));
        entry.insert(p);
        stats::parked(true);
        crate::trim::released();
        None
    });
    // Resumed outside the borrow: the resumed connection may park again.
    if let Some((p, resume)) = refused {
        resume(p.sock, p.slot, p.until);
    }
}

/// Take the connection with slab key `key` out of the lot.
fn unpark(key: usize) -> Option<(Parked, Resume)> {
    PARKED_CONNS.with_borrow_mut(|lot| {
        let lot = lot.as_mut()?;
        let p = lot.parked.try_remove(key)?;
        stats::parked(false);
        lot.deadlines.remove(&(p.until, key));
        // Failing only if the fd is not registered, which cannot be: it is ours until here.
        let _ = lot.registry.deregister(&mut SourceFd(&p.sock.as_raw_fd()));
        Some((p, lot.resume.clone()))
    })
}

async fn drive(mut poll: AsyncFd<Poll>, sooner: Rc<Notify>, shutdown: Shutdown) {
    let mut events = Events::with_capacity(256);
    let stop = shutdown.wait();
    tokio::pin!(stop);
    'drive: loop {
        let first =
            PARKED_CONNS.with_borrow(|lot| lot.as_ref()?.deadlines.first().map(|&(t, _)| t));
        let expiry = async {
            match first {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ready = poll.readable_mut() => {
                let failed = |e: io::Error| {
                    // Nothing would wake the parked connections: give them back to tasks.
                    eprintln!("loadterm: parked connections' epoll failed: {e}");
                };
                let mut ready = match ready {
                    Ok(ready) => ready,
                    Err(e) => {
                        failed(e);
                        break;
                    }
                };
                // Our epoll set is edge-triggered for tokio's: drain it before clearing (an
                // event left in it would not wake us again).
                loop {
                    match ready.get_inner_mut().poll(&mut events, Some(Duration::ZERO)) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            failed(e);
                            break 'drive;
                        }
                    }
                    if events.is_empty() {
                        break;
                    }
                    for ev in &events {
                        if let Some((p, resume)) = unpark(ev.token().0) {
                            resume(p.sock, p.slot, p.until);
                        }
                    }
                }
                ready.clear_ready();
            }
            () = expiry => expire(Instant::now()),
            () = sooner.notified() => {}
            () = &mut stop => break,
        }
    }
    // Shutdown: every parked connection goes back to a task, which closes it gracefully (or
    // answers a request that came in meanwhile); the lot takes no more.
    let keys: Vec<usize> = PARKED_CONNS.with_borrow_mut(|lot| match lot.as_mut() {
        Some(lot) => {
            lot.closed = true;
            lot.parked.iter().map(|(k, _)| k).collect()
        }
        None => Vec::new(),
    });
    for key in keys {
        if let Some((p, resume)) = unpark(key) {
            resume(p.sock, p.slot, p.until);
        }
    }
}

/// Close the connections whose idle time is over, as an idle connection in its task is closed
/// at its deadline: dropped, nothing sent.
fn expire(now: Instant) {
    let mut gone = Vec::new();
    PARKED_CONNS.with_borrow_mut(|lot| {
        let Some(lot) = lot.as_mut() else { return };
        while let Some(&(t, key)) = lot.deadlines.first() {
            if t > now {
                break;
            }
            lot.deadlines.pop_first();
            if let Some(p) = lot.parked.try_remove(key) {
                stats::parked(false);
                let _ = lot.registry.deregister(&mut SourceFd(&p.sock.as_raw_fd()));
                gone.push(p);
            }
        }
    });
    // Closed outside the borrow, which stays short.
    drop(gone);
}

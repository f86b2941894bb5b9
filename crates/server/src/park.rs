//! Idle HTTP/1 connections (clear TCP and TLS), parked out of tokio. Once a connection has been
//! idle for `h1::conn`'s `PARK_AFTER`, its task ends and its socket waits in its worker's own
//! epoll set (a `mio::Poll` that the worker awaits through `Lot::woken`), as an entry of a slab
//! plus its deadline; a socket that turns readable is given back to the worker, which serves it
//! in a new task. A parked clear connection costs about 100 bytes of this process's memory, where a task
//! waiting on its socket costs its future (~640 bytes), tokio's registration (256) and the
//! allocator's overhead: HAProxy keeps an idle connection as little more than its fd and timer.
//! A TLS connection also keeps its session (`Resume`: its keys and sequence numbers, no
//! buffer, about 3 KiB), served again with its socket.
//!
//! Everything here is per worker thread (`thread_local!`): the workers run current-thread
//! runtimes, so a connection parks and resumes on the thread that accepted it.

/// How long an idle connection keeps its task before it is handed over to be parked.
/// Parking and resuming cost about six system calls (epoll registrations moved between tokio's
/// set and the worker's), negligible once per second but not once per request: a connection
/// whose requests come less than this apart stays in its task.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

use crate::config::Config;
use crate::plumbing::shutdown::{ConnSlot, Shutdown};
use crate::plumbing::stats;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use slab::Slab;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// An idle connection out of its task: its socket, its place among the open connections,
/// until when its next request is awaited, and, over TLS, its session.
pub(crate) struct Idle {
    pub sock: TcpStream,
    pub slot: ConnSlot,
    pub until: Instant,
    /// `None` on clear TCP: the socket is all there is.
    pub session: Option<Box<dyn Resume>>,
}

/// What a parked connection keeps beside its socket (a TLS session: rustls's state, the fields
/// its responses carry), and how it is served again.
pub(crate) trait Resume: Send {
    /// Serve the connection again, on its socket back in tokio, in a task of its own.
    fn resume(
        self: Box<Self>,
        sock: tokio::net::TcpStream,
        cfg: Arc<Config>,
        slot: ConnSlot,
        until: Instant,
    );

    /// At its deadline the connection is served once more, to say goodbye (HTTP/2's GOAWAY),
    /// rather than dropped.
    fn says_goodbye(&self) -> bool {
        false
    }
}

/// What `park` did with an idle connection.
pub(crate) enum Parking {
    /// It waits in the lot: `Lot::woken` gives it back once readable, or it closes at its
    /// deadline.
    Parked,
    /// The lot did not take it (shutdown has begun, this thread has no lot, or registering the
    /// socket failed): the caller serves it on in its own task, so that it is not lost.
    Refused(Idle),
}

/// This worker's parked connections (its parking lot) and what parking needs.
struct ParkedConns {
    registry: Registry,
    parked: Slab<Idle>,
    /// Deadlines, earliest first, with their slab keys.
    deadlines: BTreeSet<(Instant, usize)>,
    /// Tells `Lot::woken` that a new earliest deadline came in.
    sooner: Rc<Notify>,
    /// Shutdown has begun (or the epoll set failed): parking is refused.
    closed: bool,
}

thread_local! {
    static PARKED_CONNS: RefCell<Option<ParkedConns>> = const { RefCell::new(None) };
}

/// Park an idle connection until it turns readable or `until` passes (then it is closed), or
/// give it back (`Parking::Refused`).
pub(crate) fn park(idle: Idle) -> Parking {
    PARKED_CONNS.with_borrow_mut(|lot| {
        let Some(lot) = lot.as_mut().filter(|lot| !lot.closed) else {
            return Parking::Refused(idle);
        };
        let entry = lot.parked.vacant_entry();
        let key = entry.key();
        let fd = idle.sock.as_raw_fd();
        if let Err(e) = lot
            .registry
            .register(&mut SourceFd(&fd), Token(key), Interest::READABLE)
        {
            eprintln!("loadterm: cannot park an idle connection: {e}");
            return Parking::Refused(idle);
        }
        if lot.deadlines.first().is_none_or(|&(t, _)| idle.until < t) {
            lot.sooner.notify_one();
        }
        lot.deadlines.insert((idle.until, key));
        entry.insert(idle);
        stats::parked(true);
        crate::plumbing::trim::released();
        Parking::Parked
    })
}

/// Take the connection with slab key `key` out of the lot.
fn unpark(lot: &mut ParkedConns, key: usize) -> Option<Idle> {
    let p = lot.parked.try_remove(key)?;
    stats::parked(false);
    lot.deadlines.remove(&(p.until, key));
    // Failing only if the fd is not registered, which cannot be: it is ours until here.
    let _ = lot.registry.deregister(&mut SourceFd(&p.sock.as_raw_fd()));
    Some(p)
}

/// The worker's end of its parking lot: it awaits `woken` for the connections to serve again.
pub(crate) struct Lot {
    poll: AsyncFd<Poll>,
    events: Events,
    sooner: Rc<Notify>,
    shutdown: Shutdown,
    /// Connections taken out of the lot and not yet given back by `woken`.
    woken: Vec<Idle>,
    /// The lot takes no more (shutdown, or its epoll set failed).
    closed: bool,
}

impl Lot {
    /// Open this worker thread's parking lot: from now on `park` takes idle connections here.
    #[allow(unsafe_code)] // tokio watches mio's epoll fd
    pub(crate) fn open(shutdown: Shutdown) -> io::Result<Lot> {
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
            closed: false,
        }));
        Ok(Lot {
            poll,
            events: Events::with_capacity(256),
            sooner,
            shutdown,
            woken: Vec::new(),
            closed: false,
        })
    }

    /// The next parked connection to serve again: one that turned readable, or, once shutdown
    /// has begun, every one (each then closes as an idle connection in its task does, or answers
    /// a request that came in meanwhile). `None` once the lot is closed and empty. Connections
    /// whose deadline passes meanwhile are closed here.
    pub(crate) async fn woken(&mut self) -> Option<Idle> {
        loop {
            if let Some(idle) = self.woken.pop() {
                return Some(idle);
            }
            if self.closed {
                return None;
            }
            self.wait().await;
        }
    }

    /// Wait for the lot's next event: sockets turned readable (taken out into `woken`), the
    /// earliest deadline (expired connections closed), a sooner deadline, or shutdown.
    async fn wait(&mut self) {
        let first =
            PARKED_CONNS.with_borrow(|lot| lot.as_ref()?.deadlines.first().map(|&(t, _)| t));
        let expiry = async {
            match first {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        let close = tokio::select! {
            ready = self.poll.readable_mut() => {
                let drained = ready.and_then(|mut ready| {
                    // Our epoll set is edge-triggered for tokio's: drain it before clearing (an
                    // event left in it would not wake us again).
                    drain(ready.get_inner_mut(), &mut self.events, &mut self.woken)?;
                    ready.clear_ready();
                    Ok(())
                });
                drained.map_err(|e| {
                    // Nothing would wake the parked connections: give them back to tasks.
                    eprintln!("loadterm: parked connections' epoll failed: {e}");
                }).is_err()
            }
            // tokio's clock, which tests pause (it is the system's otherwise).
            () = expiry => {
                expire(tokio::time::Instant::now().into_std(), &mut self.woken);
                false
            }
            () = self.sooner.notified() => false,
            () = self.shutdown.wait() => true,
        };
        if close {
            self.close();
        }
    }

    /// Take every parked connection out, to be given back, and take no more.
    fn close(&mut self) {
        PARKED_CONNS.with_borrow_mut(|lot| {
            let Some(lot) = lot.as_mut() else { return };
            lot.closed = true;
            let keys: Vec<usize> = lot.parked.iter().map(|(k, _)| k).collect();
            self.woken
                .extend(keys.into_iter().filter_map(|k| unpark(lot, k)));
        });
        self.closed = true;
    }
}

/// Take the connections whose sockets turned readable out of the lot, into `woken`, until the
/// epoll set has nothing more to say.
fn drain(poll: &mut Poll, events: &mut Events, woken: &mut Vec<Idle>) -> io::Result<()> {
    loop {
        match poll.poll(events, Some(Duration::ZERO)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if events.is_empty() {
            return Ok(());
        }
        PARKED_CONNS.with_borrow_mut(|lot| {
            let Some(lot) = lot.as_mut() else { return };
            woken.extend(events.iter().filter_map(|ev| unpark(lot, ev.token().0)));
        });
    }
}

/// Close the connections whose idle time is over, as an idle connection in its task is closed
/// at its deadline: dropped, nothing sent, unless it says goodbye (given back into `woken`).
fn expire(now: Instant, woken: &mut Vec<Idle>) {
    let mut gone = Vec::new();
    PARKED_CONNS.with_borrow_mut(|lot| {
        let Some(lot) = lot.as_mut() else { return };
        while let Some(&(t, key)) = lot.deadlines.first() {
            if t > now {
                break;
            }
            lot.deadlines.pop_first();
            gone.extend(unpark(lot, key));
        }
    });
    let (goodbye, gone): (Vec<Idle>, Vec<Idle>) = gone
        .into_iter()
        .partition(|idle| idle.session.as_ref().is_some_and(|s| s.says_goodbye()));
    woken.extend(goodbye);
    // Closed outside the borrow, which stays short.
    drop(gone);
}

/// The lot driven as the worker drives it, on loopback sockets (parking is an epoll set: it
/// needs file descriptors), with tokio's clock paused where deadlines matter.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::stats::Transport;
    use std::io::{Read, Write};
    use std::sync::atomic::AtomicUsize;

    /// A connected pair: the client's end, and the server's end as an idle connection awaited
    /// until `idle_for` from now (tokio's clock).
    fn idle_pair(conns: &Arc<AtomicUsize>, idle_for: Duration) -> (TcpStream, Idle) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, _) = listener.accept().unwrap();
        sock.set_nonblocking(true).unwrap();
        let until = tokio::time::Instant::now().into_std() + idle_for;
        let slot = ConnSlot::new(conns, Transport::Tcp);
        (
            client,
            Idle {
                sock,
                slot,
                until,
                session: None,
            },
        )
    }

    fn parked(p: Parking) -> bool {
        matches!(p, Parking::Parked)
    }

    /// Whether the client's connection is still open: nothing to read, no end of stream.
    fn open(client: &mut TcpStream) -> bool {
        client.set_nonblocking(true).unwrap();
        let mut byte = [0u8];
        match client.read(&mut byte) {
            Ok(0) => false,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            other => panic!("unexpected read: {other:?}"),
        }
    }

    /// The client reads end of stream (waiting for it, at most a generous 10 s).
    fn assert_closed(client: &mut TcpStream) {
        client.set_nonblocking(false).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut byte = [0u8];
        assert_eq!(client.read(&mut byte).unwrap(), 0, "end of stream");
    }

    #[tokio::test]
    async fn readable_connection_is_given_back() {
        let (_stop, shutdown) = Shutdown::new();
        let mut lot = Lot::open(shutdown).unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let (mut client, idle) = idle_pair(&conns, Duration::from_secs(60));
        let (peer, until) = (idle.sock.peer_addr().unwrap(), idle.until);
        assert!(parked(park(idle)));
        client.write_all(b"G").unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(20), lot.woken())
            .await
            .expect("woken once readable")
            .expect("the lot is open");
        assert_eq!(woken.sock.peer_addr().unwrap(), peer);
        assert_eq!(woken.until, until, "the same deadline");
        let mut byte = [0u8];
        (&woken.sock).read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"G", "the request byte is left for the engine");
        assert_eq!(conns.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn parked_connection_closes_at_its_deadline() {
        let (_stop, shutdown) = Shutdown::new();
        let mut lot = Lot::open(shutdown).unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let (mut client, idle) = idle_pair(&conns, Duration::from_secs(30));
        assert!(parked(park(idle)));
        let start = tokio::time::Instant::now();
        for at in [29, 31] {
            tokio::select! {
                _ = lot.woken() => panic!("nothing to give back"),
                () = tokio::time::sleep_until(start + Duration::from_secs(at)) => {}
            }
            if at < 30 {
                assert!(open(&mut client), "open before its deadline");
            }
        }
        assert_closed(&mut client);
        assert_eq!(conns.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn shutdown_gives_every_connection_back_and_refuses_more() {
        let (stop, shutdown) = Shutdown::new();
        let mut lot = Lot::open(shutdown).unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let (_a, first) = idle_pair(&conns, Duration::from_secs(60));
        let (_b, second) = idle_pair(&conns, Duration::from_secs(60));
        assert!(parked(park(first)) && parked(park(second)));
        stop.fire();
        let mut given_back = 0;
        while let Some(idle) = lot.woken().await {
            drop(idle);
            given_back += 1;
        }
        assert_eq!(given_back, 2);
        let (_c, third) = idle_pair(&conns, Duration::from_secs(60));
        assert!(!parked(park(third)), "refused after shutdown");
    }

    #[tokio::test]
    async fn without_a_lot_parking_is_refused() {
        let conns = Arc::new(AtomicUsize::new(0));
        let (mut client, idle) = idle_pair(&conns, Duration::from_secs(60));
        let Parking::Refused(idle) = park(idle) else {
            panic!("parked with no lot on this thread");
        };
        assert!(open(&mut client), "given back open");
        drop(idle);
    }
}

//! Zero-copy large bodies on clear-text TCP (Linux). Body bytes live in static, immutable blocks
//! (`plan::body`), so `vmsplice` can hand their pages to a pipe by reference and `splice` can
//! pass those references on to the socket: no per-response copy in user space or into the
//! socket buffer. Pattern bodies are `tee`d from a per-thread pipe pre-filled with the pattern
//! (as haterm does): `tee` only takes references to pages already in a pipe, where `vmsplice`
//! pins user pages on every call. Other bodies, and the few bytes that realign a pattern body on
//! its 50-byte period, are `vmsplice`d.
#![allow(unsafe_code)] // pipe, vmsplice, tee and splice system calls throughout

use loadterm_plan::body::{self, BodyKind};
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bodies at least this large are spliced; smaller ones are cheaper to copy with the head.
pub(super) const MIN_SIZE: u64 = 64 * 1024;
/// Idle pipes kept per worker thread for the next responses.
const POOL: usize = 64;
/// Static slices per `vmsplice`.
const IOV: usize = 4;

/// A pipe that holds no data (kept in the per-thread pool between responses).
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

thread_local! {
    static IDLE: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
    /// The pattern from offset 0, `.1` bytes of it (a multiple of its period) to `tee` from;
    /// `None` if it could not be made (then everything is `vmsplice`d).
    static MASTER: Option<(Pipe, usize)> = master().ok();
}

/// Capacity asked for the master pipe (the default `pipe-max-size`).
const MASTER_SIZE: usize = 1024 * 1024;

fn master() -> io::Result<(Pipe, usize)> {
    // A pooled pipe may come back: its capacity is set again.
    let pipe = Pipe::take(MASTER_SIZE)?;
    // SAFETY: plain fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(
            pipe.w.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            MASTER_SIZE as libc::c_int,
        )
    };
    let mut filled = 0u64;
    // Until the pipe is full (EAGAIN) or holds the size asked for.
    while filled < MASTER_SIZE as u64 {
        match fill(&pipe, BodyKind::Pattern, filled, MASTER_SIZE as u64) {
            Ok(n) if n > 0 => filled += n as u64,
            _ => break,
        }
    }
    let len = filled as usize / body::LINE.len() * body::LINE.len();
    if len == 0 {
        return Err(io::Error::other("could not fill the master pipe"));
    }
    Ok((pipe, len))
}

impl Pipe {
    /// A pooled pipe, or a new one asking for `capacity` bytes (the kernel may give less; one
    /// `splice` moves up to this much). The pool holds pipes of one capacity: a process runs
    /// with one `tune.pipesize`.
    fn take(capacity: usize) -> io::Result<Pipe> {
        if let Some(p) = IDLE.with(|idle| idle.borrow_mut().pop()) {
            return Ok(p);
        }
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors into `fds` on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let p = unsafe {
            Pipe {
                r: OwnedFd::from_raw_fd(fds[0]),
                w: OwnedFd::from_raw_fd(fds[1]),
            }
        };
        // Best effort: a smaller pipe only means more system calls.
        let capacity = libc::c_int::try_from(capacity).unwrap_or(libc::c_int::MAX);
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe { libc::fcntl(p.w.as_raw_fd(), libc::F_SETPIPE_SZ, capacity) };
        Ok(p)
    }

    /// Return an empty pipe to the pool (a pipe with data left in it is simply closed).
    fn give_back(self) {
        IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            if idle.len() < POOL {
                idle.push(self);
            }
        });
    }
}

fn cvt(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Fill the (empty) pipe with body bytes `off..size`: `tee`d from the master pipe for a pattern
/// body on its period, else `vmsplice`d (for a pattern body off its period, only up to the next
/// period start). Returns how many bytes it took.
fn fill_body(pipe: &Pipe, kind: BodyKind, off: u64, size: u64) -> io::Result<usize> {
    let period = body::LINE.len() as u64;
    MASTER.with(|m| match m {
        Some((master, len)) if kind == BodyKind::Pattern => {
            if !off.is_multiple_of(period) {
                return fill(pipe, kind, off, size.min(off + period - off % period));
            }
            let want = (size - off).min(*len as u64) as usize;
            // SAFETY: tee between two pipes we hold open.
            cvt(unsafe {
                libc::tee(
                    master.r.as_raw_fd(),
                    pipe.w.as_raw_fd(),
                    want,
                    libc::SPLICE_F_NONBLOCK,
                )
            })
        }
        _ => fill(pipe, kind, off, size),
    })
}

/// Fill the (empty) pipe with page references to the static blocks holding body bytes
/// `off..size`; returns how many bytes it took.
fn fill(pipe: &Pipe, kind: BodyKind, off: u64, size: u64) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; IOV];
    let (mut count, mut o) = (0, off);
    while count < IOV && o < size {
        let s = body::slice(kind, o, (size - o).min(body::WINDOW as u64) as usize);
        iov[count] = libc::iovec {
            iov_base: s.as_ptr() as *mut libc::c_void,
            iov_len: s.len(),
        };
        count += 1;
        o += s.len() as u64;
    }
    // SAFETY: the iovecs point into 'static, never-modified blocks, which is what vmsplice
    // without SPLICE_F_GIFT requires of the memory it references.
    cvt(unsafe {
        libc::vmsplice(
            pipe.w.as_raw_fd(),
            iov.as_ptr(),
            count,
            libc::SPLICE_F_NONBLOCK,
        )
    })
}

/// Send `size` body bytes of `kind` on `sock`. Errors (including the write timeout) end the
/// connection, as for any other write.
pub(super) async fn send(
    sock: &TcpStream,
    kind: BodyKind,
    size: u64,
    write_timeout: Duration,
    pipe_size: usize,
) -> io::Result<()> {
    let pipe = Pipe::take(pipe_size)?;
    let mut off = 0u64;
    while off < size {
        let queued = fill_body(&pipe, kind, off, size)?;
        if queued == 0 {
            return Err(io::Error::other("vmsplice queued nothing"));
        }
        off += queued as u64;
        // Move them all to the socket (waiting for room as needed) before refilling.
        let mut left = queued;
        while left > 0 {
            let moved = tokio::time::timeout(write_timeout, async {
                loop {
                    sock.writable().await?;
                    match sock.try_io(Interest::WRITABLE, || {
                        // SAFETY: splice between two descriptors we hold open.
                        cvt(unsafe {
                            libc::splice(
                                pipe.r.as_raw_fd(),
                                std::ptr::null_mut(),
                                sock.as_raw_fd(),
                                std::ptr::null_mut(),
                                left,
                                libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
                            )
                        })
                    }) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        r => return r,
                    }
                }
            })
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "client stopped reading"))??;
            if moved == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            // Past the byte-counting wrapper: counted here.
            crate::plumbing::stats::bytes_out(crate::plumbing::stats::Transport::Tcp, moved);
            left -= moved;
        }
    }
    pipe.give_back();
    Ok(())
}

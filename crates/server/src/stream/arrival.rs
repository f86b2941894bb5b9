//! When a request's bytes reached this host: the kernel's receive timestamp (`SO_TIMESTAMPNS`)
//! of a TCP read. A delay (`t=`) counts from the request's arrival; counted from the read
//! instead, it also held the server's own wake-up (tens of µs on an idle vCPU). Turned on per
//! connection, at its first delayed request, so that other connections read as before.

#![allow(unsafe_code)] // setsockopt and recvmsg with control data

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::AsRawFd;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Ask the kernel to stamp the bytes `sock` receives from now on.
pub(crate) fn enable(sock: &TcpStream) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket, and an option value of the size given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Read into `buf`'s spare capacity (as `read_buf`), with the arrival of the last byte read
/// when the kernel stamped it.
pub(crate) async fn read(
    sock: &TcpStream,
    buf: &mut Vec<u8>,
) -> io::Result<(usize, Option<Instant>)> {
    if buf.capacity() == buf.len() {
        buf.reserve(1);
    }
    loop {
        sock.readable().await?;
        match sock.try_io(Interest::READABLE, || recv(sock, buf)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

fn recv(sock: &TcpStream, buf: &mut Vec<u8>) -> io::Result<(usize, Option<Instant>)> {
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // Room for one SCM_TIMESTAMPNS (a timespec), aligned as a cmsghdr.
    let mut control = [MaybeUninit::<u64>::uninit(); 8];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    // SAFETY: `msg` describes `buf`'s spare capacity and `control`, both writable for the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel wrote `n` bytes into the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok((n, stamp(&msg)))
}

/// The SCM_TIMESTAMPNS in `msg`'s control data, as an `Instant`.
fn stamp(msg: &libc::msghdr) -> Option<Instant> {
    // SAFETY: `msg` was filled by recvmsg; the CMSG macros stay within `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return Some(as_instant(ts));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// A wall-clock stamp as an `Instant`: its age now, taken from `Instant::now()` (never later).
fn as_instant(ts: libc::timespec) -> Instant {
    let at = UNIX_EPOCH + std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    let age = SystemTime::now().duration_since(at).unwrap_or_default();
    let now = Instant::now();
    now.checked_sub(age).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    /// Bytes that waited in the socket are stamped with when they came, not when they are read.
    #[tokio::test]
    async fn bytes_read_late_carry_their_arrival() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        enable(&server).unwrap();
        // The kernel turns stamping on for the whole host a moment after the first socket asks
        // (a deferred static key): until then bytes come unstamped.
        let mut buf = Vec::with_capacity(64);
        let t0 = Instant::now();
        loop {
            client.write_all(b".").await.unwrap();
            if read(&server, &mut buf).await.unwrap().1.is_some() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "never stamped");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        buf.clear();
        let sent = Instant::now();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (n, at) = read(&server, &mut buf).await.unwrap();
        let read_at = Instant::now();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
        let at = at.expect("a stamp");
        assert!(at >= sent - Duration::from_millis(5), "{:?}", sent - at);
        assert!(
            read_at - at >= Duration::from_millis(150),
            "{:?}",
            read_at - at
        );
    }

    #[tokio::test]
    async fn without_enable_there_is_no_stamp() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        client.write_all(b"x").await.unwrap();
        let mut buf = Vec::with_capacity(8);
        assert_eq!(read(&server, &mut buf).await.unwrap(), (1, None));
    }
}

//! What is listened on: `-L [<ip>]:<clear port>[:<tls port>]` (haterm's syntax) and `bind`
//! lines, as one list of listeners, and the sockets behind them: one SO_REUSEPORT socket per
//! worker thread and address, bound up front so that errors surface at start-up with a clear
//! message.

use crate::config::TCP_ALPN;
use anyhow::{bail, Context, Result};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerKind {
    /// TCP: HTTP/1.1 and h2c (prior knowledge or Upgrade).
    Clear,
    /// TLS over TCP: HTTP/2 and HTTP/1.x by ALPN.
    Tls,
    /// QUIC over UDP: HTTP/3.
    Quic,
}

/// One listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    pub kind: ListenerKind,
    pub addr: SocketAddr,
    /// Certificate files or directories (TLS, QUIC); empty: the default certificate
    /// (generated, or `--cert`).
    pub crt: Vec<PathBuf>,
    /// ALPN offered on TLS/TCP, most preferred first.
    pub alpn: Vec<String>,
}

impl Listener {
    pub(crate) fn new(kind: ListenerKind, addr: SocketAddr) -> Listener {
        let alpn = match kind {
            ListenerKind::Clear => Vec::new(),
            ListenerKind::Tls => TCP_ALPN.iter().map(|p| p.to_string()).collect(),
            ListenerKind::Quic => vec!["h3".to_owned()],
        };
        Listener {
            kind,
            addr,
            crt: Vec::new(),
            alpn,
        }
    }

    /// The transport's name, for messages.
    pub(crate) fn proto(&self) -> &'static str {
        match self.kind {
            ListenerKind::Clear | ListenerKind::Tls => "TCP",
            ListenerKind::Quic => "UDP",
        }
    }

    /// Whether it needs a certificate.
    pub(crate) fn secure(&self) -> bool {
        self.kind != ListenerKind::Clear
    }
}

/// The listeners of `-L` specs: the clear port, and on the TLS port TLS/TCP and (unless
/// `quic` is off) QUIC on its UDP twin.
pub(crate) fn from_specs(specs: &[ListenSpec], quic: bool) -> Vec<Listener> {
    let mut out = Vec::new();
    for s in specs {
        out.push(Listener::new(ListenerKind::Clear, s.clear()));
        if let Some(tls) = s.tls() {
            out.push(Listener::new(ListenerKind::Tls, tls));
            if quic {
                out.push(Listener::new(ListenerKind::Quic, tls));
            }
        }
    }
    out
}

/// Refuse an address given twice for the same transport (the second bind would only share
/// the first one's traffic).
pub(crate) fn check_unique(listeners: &[Listener]) -> Result<()> {
    for (i, l) in listeners.iter().enumerate() {
        if listeners[..i]
            .iter()
            .any(|o| o.addr == l.addr && o.proto() == l.proto())
        {
            bail!(
                "{} {} is given twice (-L and bind lines)",
                l.proto(),
                l.addr
            );
        }
    }
    Ok(())
}

/// One `-L` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenSpec {
    pub ip: IpAddr,
    pub clear_port: u16,
    pub tls_port: Option<u16>,
}

impl ListenSpec {
    pub(crate) fn clear(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.clear_port)
    }

    pub(crate) fn tls(&self) -> Option<SocketAddr> {
        self.tls_port.map(|p| SocketAddr::new(self.ip, p))
    }

    /// The default when no `-L` is given: loopback only.
    pub(crate) fn default_loopback() -> Self {
        ListenSpec {
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            clear_port: 8888,
            tls_port: Some(8889),
        }
    }
}

impl std::str::FromStr for ListenSpec {
    type Err = String;

    /// `[ip]:port[:port]`, `[v6]:port[:port]`; an empty address means all IPv4 addresses (as
    /// haterm), a host name is resolved.
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || {
            format!("invalid listener '{s}': expected [<ip>]:<clear port>[:<tls port>], IPv6 in brackets")
        };
        let (host, ports, v6) = if let Some(rest) = s.strip_prefix('[') {
            let end = rest.find(']').ok_or_else(usage)?;
            let ports = rest[end + 1..].strip_prefix(':').ok_or_else(usage)?;
            (&rest[..end], ports, true)
        } else {
            let colon = s.find(':').ok_or_else(usage)?;
            (&s[..colon], &s[colon + 1..], false)
        };
        let mut fields = ports.split(':');
        let port = |f: Option<&str>| -> Result<Option<u16>, String> {
            match f {
                None => Ok(None),
                Some(p) => p
                    .parse::<u16>()
                    .map(Some)
                    .map_err(|_| format!("invalid port '{p}' in listener '{s}'")),
            }
        };
        let clear_port = port(fields.next())?.ok_or_else(usage)?;
        let tls_port = port(fields.next())?;
        if fields.next().is_some() {
            return Err(usage());
        }
        let ip = if host.is_empty() {
            if v6 {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            } else {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            }
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            ip
        } else {
            (host, clear_port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve '{host}' in listener '{s}': {e}"))?
                .next()
                .ok_or_else(|| format!("'{host}' in listener '{s}' resolves to nothing"))?
                .ip()
        };
        Ok(ListenSpec {
            ip,
            clear_port,
            tls_port,
        })
    }
}

/// Refuse an address another process already holds: with SO_REUSEPORT the kernel would silently
/// split the traffic between us (a classic way to ruin a benchmark).
fn ensure_free(addr: SocketAddr, ty: Type) -> Result<()> {
    let probe = Socket::new(Domain::for_address(addr), ty, None)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    if ty == Type::STREAM {
        // Connections left in TIME-WAIT by a previous run must not block a restart; a listener
        // still does (Linux refuses SO_REUSEADDR binds next to a listening socket).
        probe.set_reuse_address(true)?;
    }
    match probe.bind(&SockAddr::from(addr)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let proto = if ty == Type::STREAM { "TCP" } else { "UDP" };
            bail!("{proto} {addr} is already in use by another socket")
        }
        Err(e) => Err(e).with_context(|| format!("cannot bind {addr}")),
    }
}

fn reuseport_socket(addr: SocketAddr, ty: Type) -> Result<Socket> {
    let proto = if ty == Type::STREAM {
        Protocol::TCP
    } else {
        Protocol::UDP
    };
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&SockAddr::from(addr))
        .with_context(|| format!("cannot bind {addr}"))?;
    Ok(s)
}

/// `count` TCP listeners sharing `addr` (one per worker).
pub(crate) fn tcp_listeners(addr: SocketAddr, count: usize) -> Result<Vec<std::net::TcpListener>> {
    ensure_free(addr, Type::STREAM)?;
    (0..count)
        .map(|_| {
            let s = reuseport_socket(addr, Type::STREAM)?;
            s.listen(4096)
                .with_context(|| format!("cannot listen on {addr}"))?;
            Ok(s.into())
        })
        .collect()
}

/// `count` UDP sockets sharing `addr` (one QUIC endpoint per worker).
pub(crate) fn udp_sockets(addr: SocketAddr, count: usize) -> Result<Vec<std::net::UdpSocket>> {
    ensure_free(addr, Type::DGRAM)?;
    (0..count)
        .map(|_| Ok(reuseport_socket(addr, Type::DGRAM)?.into()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<ListenSpec, String> {
        s.parse()
    }

    #[test]
    fn specs_and_duplicates() {
        let specs = [p("127.0.0.1:80:443").unwrap(), p("127.0.0.1:81").unwrap()];
        let kinds = |quic| -> Vec<_> {
            from_specs(&specs, quic)
                .iter()
                .map(|l| (l.kind, l.addr.port()))
                .collect()
        };
        assert_eq!(
            kinds(true),
            [
                (ListenerKind::Clear, 80),
                (ListenerKind::Tls, 443),
                (ListenerKind::Quic, 443),
                (ListenerKind::Clear, 81)
            ]
        );
        assert_eq!(kinds(false).len(), 3);
        // TCP and UDP may share a port (the seed's two bind lines); one transport may not.
        let mut all = from_specs(&specs, true);
        assert!(check_unique(&all).is_ok());
        all.push(Listener::new(
            ListenerKind::Clear,
            "127.0.0.1:443".parse().unwrap(),
        ));
        let e = check_unique(&all).unwrap_err().to_string();
        assert_eq!(e, "TCP 127.0.0.1:443 is given twice (-L and bind lines)");
    }

    #[test]
    fn haterm_listener_syntax() {
        assert_eq!(
            p("127.0.0.1:8888:8889").unwrap().tls(),
            Some("127.0.0.1:8889".parse().unwrap())
        );
        assert_eq!(p("127.0.0.1:8888").unwrap().tls_port, None);
        assert_eq!(p(":8888").unwrap().ip, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(
            p("[::1]:8888:8889").unwrap().clear(),
            "[::1]:8888".parse().unwrap()
        );
        assert_eq!(p("[::]:80").unwrap().ip, "::".parse::<IpAddr>().unwrap());
        assert_eq!(p("localhost:80").unwrap().clear_port, 80);
        for bad in [
            "8888",
            "::1:80",
            "[::1:80",
            "1.2.3.4:a",
            "1.2.3.4:1:2:3",
            "1.2.3.4:",
            "1.2.3.4:70000",
            "[::1]80",
        ] {
            assert!(p(bad).is_err(), "{bad} should be rejected");
        }
    }
}

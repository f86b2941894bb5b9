//! Test support shared by the integration tests: start the real `loadterm` binary on free
//! loopback ports, wait until it answers, kill it on drop.

pub(crate) mod h2raw;
pub(crate) mod http1;
pub(crate) mod metrics;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_loadterm")
}

/// A port free on 127.0.0.1 for both TCP and UDP right now, never handed out before in this
/// process. The OS picks it; between its pick and the server's bind the port is free, and
/// without the record a test running beside could be given it too. Both servers would then
/// think the port theirs: the later one fails to bind it and exits, and a connection to the port
/// reaches the other (CI once saw a `--timeout 4s` test's connection closed by another test's
/// `--timeout 1s` server; servers are also waited for with `wait_listening`).
pub(crate) fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind tcp :0");
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port)
        {
            return port;
        }
    }
}

pub(crate) struct Server {
    pub child: Child,
    pub clear_port: u16,
    pub tls_port: u16,
}

impl Server {
    /// `loadterm serve -L 127.0.0.1:<clear>:<tls> <extra...>`, ready to answer.
    pub(crate) fn start(extra: &[&str]) -> Server {
        Server::start_with(extra, Stdio::inherit)
    }

    /// As `start`, with the server's stderr piped to `child.stderr`, for a test that reads
    /// what it prints at exit.
    pub(crate) fn start_capturing_stderr(extra: &[&str]) -> Server {
        Server::start_with(extra, Stdio::piped)
    }

    /// As `start`, on these ports (to take over from a server that exited, say).
    pub(crate) fn start_at(clear_port: u16, tls_port: u16, extra: &[&str]) -> Server {
        Server::try_start_at(clear_port, tls_port, extra)
            .unwrap_or_else(|| panic!("loadterm serve did not start on {clear_port}:{tls_port}"))
    }

    /// As `start_at`; `None` if the server does not listen there (it exited, say).
    pub(crate) fn try_start_at(clear_port: u16, tls_port: u16, extra: &[&str]) -> Option<Server> {
        Server::spawn(clear_port, tls_port, extra, Stdio::inherit)
    }

    fn start_with(extra: &[&str], stderr: fn() -> Stdio) -> Server {
        for _ in 0..5 {
            if let Some(s) = Server::spawn(free_port(), free_port(), extra, stderr) {
                return s;
            }
        }
        panic!("loadterm serve did not start");
    }

    fn spawn(
        clear_port: u16,
        tls_port: u16,
        extra: &[&str],
        stderr: fn() -> Stdio,
    ) -> Option<Server> {
        let listen = format!("127.0.0.1:{clear_port}:{tls_port}");
        let mut child = Command::new(bin())
            .args(["serve", "-L", &listen])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr())
            .spawn()
            .expect("spawn loadterm serve");
        if wait_listening(&mut child, &[clear_port, tls_port], Duration::from_secs(15)) {
            return Some(Server {
                child,
                clear_port,
                tls_port,
            });
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    pub(crate) fn clear_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.clear_port))
    }

    /// The server's resident memory (`VmRSS`), KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server is gone");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// Ask for a graceful shutdown.
    pub(crate) fn sigterm(&self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until something accepts TCP connections on 127.0.0.1:port.
pub(crate) fn wait_tcp(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Wait until `child` itself listens on each of these TCP ports of 127.0.0.1; `false` if it
/// exits first (it could not bind one) or after `limit`. Not `wait_tcp`: another process may
/// answer on a port this child failed to bind.
pub(crate) fn wait_listening(child: &mut Child, ports: &[u16], limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        let held = sockets_of(child.id());
        if ports
            .iter()
            .all(|&p| listeners_on(child.id(), p).iter().any(|i| held.contains(i)))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The inodes of the sockets process `pid` holds open.
fn sockets_of(pid: u32) -> BTreeSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// The inodes of the TCP sockets listening on 127.0.0.1:`port` in the network namespace of
/// process `pid` (a test may run its server in a namespace of its own).
fn listeners_on(pid: u32, port: u16) -> Vec<u64> {
    let local = format!("0100007F:{port:04X}");
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl, local_address, rem_address, st (0A: LISTEN), …, inode (the tenth).
            (f.len() > 9 && f[1] == local && f[3] == "0A")
                .then(|| f[9].parse().ok())
                .flatten()
        })
        .collect()
}

/// Poll `cond` every 20 ms until it holds; fail naming `what` after `limit`. The limit only
/// ends a wait for something that never comes: make it generous, a busy machine is slow.
pub(crate) fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A test that cannot run here (`why`) fails, so CI cannot pass a test it did not run; with
/// LOADTERM_ALLOW_MISSING_TOOLS set (a developer's machine without the tool), it says on stderr
/// that it skips, and the caller returns.
pub(crate) fn cannot_run(why: &str) {
    if std::env::var_os("LOADTERM_ALLOW_MISSING_TOOLS").is_none() {
        panic!("cannot run: {why} (set LOADTERM_ALLOW_MISSING_TOOLS=1 to skip locally)");
    }
    eprintln!("skipped: {why} (LOADTERM_ALLOW_MISSING_TOOLS is set)");
}

/// Whether an external tool is on PATH; when it is not, `cannot_run` fails the test or prints
/// the skip.
pub(crate) fn have_tool(name: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !found {
        cannot_run(&format!(
            "{name} is not installed (scripts/install-test-deps.sh)"
        ));
    }
    found
}

/// Whether python3 can import aioquic; when it cannot, `cannot_run` fails the test or prints the
/// skip.
pub(crate) fn have_aioquic() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import aioquic"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        cannot_run("python3 with aioquic is not installed (pip install aioquic)");
    }
    ok
}

/// tests/h3client/h3get.py (aioquic) against 127.0.0.1:`port`, with these requests, to spawn
/// or run.
pub(crate) fn h3get_cmd(port: u16, requests: &[&str]) -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/h3client/h3get.py");
    let mut c = Command::new("python3");
    c.arg(script)
        .arg("127.0.0.1")
        .arg(port.to_string())
        .args(requests);
    c
}

/// Run tests/h3client/h3get.py (aioquic) against 127.0.0.1:`port` with `env` set: one JSON
/// value per request line it prints.
pub(crate) fn h3get(port: u16, env: &[(&str, &str)], requests: &[&str]) -> Vec<serde_json::Value> {
    let out = h3get_cmd(port, requests)
        .envs(env.iter().copied())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "h3get failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `loadterm load ARGS --json - -q`, to spawn or run.
pub(crate) fn load_cmd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(bin());
    c.arg("load").args(args).args(["--json", "-", "-q"]);
    c
}

/// The JSON report of a `loadterm load` run that ended normally.
pub(crate) fn report(out: std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "loadterm load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

/// A scratch directory of one test (`tag` tells the tests of one file apart), removed on drop.
pub(crate) struct Dir(std::path::PathBuf);

impl Dir {
    pub(crate) fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("loadterm-test-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub(crate) fn file(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `loadterm ab ARGS`, run to its end.
/// The server of an ab comparison: this build's, on one thread, without QUIC, `extra`
/// appended (e.g. " --burn 20").
pub(crate) fn ab_server(extra: &str) -> String {
    format!(
        "{} serve -t 1 -L {{host}}:{{clear_port}}:{{tls_port}} --no-quic{extra}",
        bin()
    )
}

pub(crate) fn ab(args: &[&str]) -> std::process::Output {
    Command::new(bin()).arg("ab").args(args).output().unwrap()
}

/// A JSON report written to `path`.
pub(crate) fn json_file(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Whether cgroups and network namespaces can be made here (root); when not, `cannot_run`
/// fails or prints the skip.
#[allow(unsafe_code)] // geteuid
pub(crate) fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        cannot_run("cgroups and network namespaces are made only as root");
    }
    root
}

/// Cgroup directories named after ab (or agent) process `pid`, in every hierarchy.
pub(crate) fn cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    let prefix = format!("loadterm-ab-{pid}-");
    let mut found = Vec::new();
    let mut stack = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                found.push(e.path());
            } else {
                stack.push(e.path());
            }
        }
    }
    found
}

/// Processes whose command line holds `marker`.
pub(crate) fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(marker))
        .count()
}

/// Short ab runs: a fixed rate (no pilot), two measured rounds (`--rounds` first, for a test
/// that gives its own), no warm-up load when a server starts and no warm-up round (each
/// window's client warms its connections up anyway), and contaminated rounds kept: the tests
/// beside it and the VM's steal would flag most rounds, and what these tests check does not
/// depend on clean ones.
pub(crate) const AB_SHORT: &[&str] = &[
    "--rounds",
    "2",
    "--duration",
    "1s",
    "--warmup",
    "0s",
    "--rate",
    "2000",
    "-c",
    "4",
    "-m",
    "2",
    "--max-repeats",
    "0",
    "--keep-first-round",
];

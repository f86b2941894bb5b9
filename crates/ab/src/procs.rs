//! Server processes: started through `sh -c` in their own process group and cgroup, pinned to
//! the server CPUs; measured from the cgroup (or, where none could be made, the /proc tree);
//! stopped with SIGTERM then SIGKILL, their containers through the runtime.

use crate::cgroup::{self, Accounting, Cgroup};
use crate::container::{Container, RunCommand};
use crate::contam;
use anyhow::{bail, Context, Result};
use loadterm_runtime::cpus::CpuSet;
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pin the child process to `cpus` before exec (an error when the command runs, if the kernel
/// refuses).
#[allow(unsafe_code)] // pre_exec
pub(crate) fn pin(cmd: &mut Command, cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let set = CpuSet::new(cpus).with_context(|| format!("CPUs {cpus:?}"))?;
    // SAFETY: only one async-signal-safe call (sched_setaffinity) between fork and exec.
    unsafe { cmd.pre_exec(move || set.pin_current()) };
    Ok(())
}

static INTERRUPTED: std::sync::LazyLock<Arc<AtomicBool>> = std::sync::LazyLock::new(Arc::default);

/// From now on SIGINT and SIGTERM only set a flag (`interrupted`): the harness then stops its
/// rounds, stops the servers it started (in their own process groups, which the terminal's
/// signal does not reach) and reports what it measured.
pub(crate) fn catch_interrupts() -> Result<()> {
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, INTERRUPTED.clone())
            .with_context(|| format!("cannot handle signal {signal}"))?;
    }
    Ok(())
}

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Pin this process's calling thread (and the threads it starts after) to `cpus`.
pub(crate) fn pin_self(cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    CpuSet::new(cpus)
        .and_then(|set| set.pin_current())
        .with_context(|| format!("cannot pin ab to CPUs {cpus:?}"))
}

/// A started server or backend: the process ab started, its cgroup (where one could be made),
/// and the container it runs, if it is one.
pub(crate) struct ServerProc {
    child: Child,
    /// The command as run (with what ab added to a container's `run`).
    command: String,
    /// Where its stderr goes (a file, not a pipe: a long-lived process writing logs would block
    /// on a full pipe nobody reads).
    log: std::path::PathBuf,
    cgroup: Option<Cgroup>,
    container: Option<Container>,
    /// The container's first process, once found (`locate`).
    container_pid: Option<u32>,
    /// What ab changed in a container's command and found of it, for the user.
    notes: Vec<String>,
    /// The started process exited and left processes in its cgroup: a daemon, measured and
    /// stopped through the cgroup.
    daemon: bool,
}

/// CPU, memory and scheduling counters of a server at one instant.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct UsageSample {
    /// utime + stime of the /proc tree, clock ticks (cgroups: the same from `cpu_ns`).
    pub cpu_ticks: u64,
    /// CPU time in nanoseconds: the cgroup's usage, or, for a /proc tree, the scheduler's own
    /// account of every thread (`/proc/PID/task/TID/schedstat`, first field). Unlike the
    /// ticks, a one-second window reads it to the microsecond; but in a /proc tree, threads
    /// that exit between two readings take their time with them.
    pub cpu_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    pub rss_kib: u64,
    pub ctx_switches: u64,
}

impl ServerProc {
    /// Start `command` through `sh -c` in its own process group, pinned to `cpus`, inside
    /// `cgroup` (made for it, removed when it stops), with its stderr and any container id
    /// file in `dir` (whose name labels its container).
    #[allow(unsafe_code)] // entering the cgroup between fork and exec
    pub(crate) fn start(
        command: &str,
        cpus: &[usize],
        dir: &std::path::Path,
        cgroup: Option<Cgroup>,
    ) -> Result<ServerProc> {
        let log = dir.join("stderr");
        let err = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let (container, command, notes) = match RunCommand::parse(command) {
            Some(run) => {
                let cidfile = dir.join("cid");
                let (with, notes) = run.adapt(
                    command,
                    &cidfile,
                    name,
                    cgroup.as_ref().map(Cgroup::path),
                    &contam::cpu_list(cpus),
                );
                let cidfile = run.cidfile.map_or(cidfile, std::path::PathBuf::from);
                (
                    Some(Container::new(run.runtime, cidfile, name)),
                    with,
                    notes,
                )
            }
            None => (None, command.to_owned(), Vec::new()),
        };
        let left = serde_json::json!({ "cgroup": &cgroup, "container": &container });
        std::fs::write(dir.join(LEFT), left.to_string())
            .with_context(|| format!("cannot write {}", dir.join(LEFT).display()))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .process_group(0);
        pin(&mut cmd, cpus)?;
        if let Some(cg) = &cgroup {
            let files = cg.procs_files();
            // SAFETY: `enter` makes only open/write/close calls between fork and exec.
            unsafe { cmd.pre_exec(move || cgroup::enter(&files)) };
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{command}`"))?;
        Ok(ServerProc {
            child,
            command,
            log,
            cgroup,
            container,
            container_pid: None,
            notes,
            daemon: false,
        })
    }

    /// The command as run.
    pub(crate) fn command(&self) -> &str {
        &self.command
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How this server's CPU and memory are read.
    pub(crate) fn accounting(&self) -> Accounting {
        self.cgroup
            .as_ref()
            .map_or(Accounting::ProcTree, Cgroup::accounting)
    }

    /// The same in words, for the user: e.g. "cgroup v1 /loadterm-ab-…", with what ab found
    /// on the way (a container's cgroup, a daemon).
    pub(crate) fn describe_accounting(&self) -> String {
        match &self.cgroup {
            Some(cg) => {
                let mut text = format!("{} {}", cg.accounting(), cg.path());
                if !cg.has_memory() {
                    text.push_str(" (memory from its processes: no memory controller there)");
                }
                if self.container_pid.is_some() {
                    text.push_str(" (read in its container's own cgroup, without the runtime's processes)");
                } else if self.daemon {
                    text.push_str(" (a daemon: the started process exited, its cgroup kept running)");
                }
                text
            }
            None => "the /proc tree under the started process (no cgroup could be made: not root, or no delegation)".into(),
        }
    }

    /// Whether the server is gone (its stderr then explains why). A started process that
    /// exited and left processes in its cgroup is a daemon: still running; so is a detached
    /// container (`RUNTIME run -d` exits once it has started it).
    pub(crate) fn exited(&mut self) -> Option<String> {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status,
            _ => return None,
        };
        if self.container.is_some() && status.success() {
            self.locate();
        }
        if let Some(cg) = &self.cgroup {
            let left = cg.pids().len();
            if left > 0 {
                if !self.daemon {
                    self.daemon = true;
                    // Said once: a detached container is started again with its server.
                    static SAID: std::sync::atomic::AtomicBool =
                        std::sync::atomic::AtomicBool::new(false);
                    match &self.container {
                        Some(_) if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) => {}
                        Some(c) => eprintln!(
                            "ab: `{} run` exited ({status}) and left its container running (detached): measured through its cgroup, removed when the variant stops",
                            c.runtime_name()
                        ),
                        None => eprintln!(
                            "ab: the started process exited ({status}) and left {left} processes in its cgroup: measured through the cgroup, stopped with it"
                        ),
                    }
                }
                return None;
            }
        }
        let err = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = err.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" / ");
        Some(format!("{status}: {}", tail.trim()))
    }

    /// A container's first process and cgroups, once it runs: its memory is read from its own
    /// cgroup, and its CPU too where its runtime put it outside the variant's (a command's own
    /// `--cgroup-parent`). Said in `notes`.
    fn locate(&mut self) {
        if self.container_pid.is_some() {
            return;
        }
        let Some(c) = &self.container else { return };
        let (Some(id), Some(pid)) = (c.id(), c.pid()) else {
            return;
        };
        self.container_pid = Some(pid);
        let Some(cg) = self.cgroup.as_mut() else {
            return;
        };
        if let Some(path) = cg.follow(pid) {
            self.notes.push(format!(
                "container {} runs in cgroup {path}, outside {}: read there",
                &id[..id.len().min(12)],
                cg.path()
            ));
        }
    }

    /// Once the server answers: what ab changed in a container's command and found of it.
    pub(crate) fn located(&mut self) -> Option<String> {
        self.locate();
        (!self.notes.is_empty()).then(|| self.notes.join("; "))
    }

    /// Every process of the server: its cgroup's, or its /proc tree.
    pub(crate) fn pids(&self) -> Vec<u32> {
        match &self.cgroup {
            Some(cg) => cg.pids(),
            None => tree(self.pid()),
        }
    }

    /// CPUs some process of the server may run on outside `cpus` (a container whose runtime
    /// reset the affinity ab gave it), as "PID: LIST".
    pub(crate) fn unpinned(&self, cpus: &[usize]) -> Option<String> {
        if cpus.is_empty() {
            return None;
        }
        self.pids().into_iter().find_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_owned();
            contam::parse_cpu_list(&list)
                .iter()
                .any(|c| !cpus.contains(c))
                .then(|| format!("{pid}: CPUs {list}"))
        })
    }

    /// Whether a socket listening on `port` (TCP) belongs to this server.
    pub(crate) fn owns_port(&self, port: u16) -> bool {
        let inodes = listening_inodes(port);
        self.pids().into_iter().any(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|fd| {
                    std::fs::read_link(fd.path())
                        .ok()
                        .and_then(|l| l.to_str().map(str::to_owned))
                        .is_some_and(|l| {
                            l.strip_prefix("socket:[")
                                .and_then(|r| r.strip_suffix(']'))
                                .is_some_and(|i| inodes.iter().any(|x| x == i))
                        })
                })
        })
    }

    /// CPU, memory and context switches of the server now.
    pub(crate) fn sample(&self) -> Result<UsageSample> {
        let Some(cg) = &self.cgroup else {
            return Ok(sample_tree(self.pid()));
        };
        let u = cg.usage()?;
        let pids = cg.pids();
        let mut s = UsageSample {
            cpu_ns: u.cpu_ns,
            cpu_ticks: (u.cpu_ns as f64 * clk_tck() / 1e9).round() as u64,
            user_ns: u.user_ns,
            system_ns: u.system_ns,
            rss_kib: u.anon_kib.unwrap_or(0),
            ctx_switches: 0,
        };
        for pid in pids {
            let p = sample_process(pid);
            s.ctx_switches += p.ctx_switches;
            if u.anon_kib.is_none() {
                s.rss_kib += p.rss_kib;
            }
        }
        Ok(s)
    }

    /// Whether CPU is read from a cgroup (exact at any window) or from a /proc tree.
    pub(crate) fn in_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Stop the server: SIGTERM to its process group (an attached `RUNTIME run` forwards it
    /// to its container, and with `--rm` removes it), its container removed through the
    /// runtime (detached, or left by a `run` that did not finish), SIGKILL after `grace`, then
    /// whatever is left in its cgroup, which is removed.
    #[allow(unsafe_code)] // kill
    pub(crate) fn stop(mut self, grace: Duration) {
        let pgid = self.pid() as i32;
        // SAFETY: plain kill(2) on our own child's process group.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < grace {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(c) = &self.container {
            c.remove(grace);
        }
        // SAFETY: as above; the group may already be gone.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        if let Some(cg) = self.cgroup.take() {
            let path = cg.path().to_owned();
            if let Err(e) = cg.remove(grace) {
                eprintln!("ab: {e:#}");
            }
            if self.container.is_some() {
                cgroup::remove_runtime_leftovers(&path);
            }
        }
    }
}

/// The file of a server's scratch directory that records its cgroup and container.
const LEFT: &str = "left.json";

/// What `LEFT` records.
#[derive(serde::Deserialize)]
struct Left {
    cgroup: Option<Cgroup>,
    container: Option<Container>,
}

/// Remove what the server whose scratch directory is `dir` left, its ab killed before it could
/// stop it (SIGKILL): its container, the processes left in its cgroup, the cgroup. Returns
/// what was removed, in words.
pub(crate) fn remove_left(dir: &std::path::Path) -> Vec<String> {
    let Some(left) = std::fs::read_to_string(dir.join(LEFT))
        .ok()
        .and_then(|t| serde_json::from_str::<Left>(&t).ok())
    else {
        return Vec::new();
    };
    let grace = Duration::from_secs(1);
    let mut removed: Vec<String> = left
        .container
        .iter()
        .flat_map(|c| c.remove(grace))
        .map(|id| format!("container {}", &id[..id.len().min(12)]))
        .collect();
    if let Some(cg) = left.cgroup.filter(Cgroup::exists) {
        let path = cg.path().to_owned();
        match cg.remove(grace) {
            Ok(()) => removed.push(format!("cgroup {path}")),
            Err(e) => eprintln!("ab: {e:#}"),
        }
        cgroup::remove_runtime_leftovers(&path);
    }
    removed
}

/// Every pid of the tree rooted at `root`.
pub(crate) fn tree(root: u32) -> Vec<u32> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse().ok()))
            {
                parent.insert(pid, ppid);
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// CPU, RSS and context switches summed over the tree rooted at `root`.
pub(crate) fn sample_tree(root: u32) -> UsageSample {
    let mut s = UsageSample::default();
    for pid in tree(root) {
        let p = sample_process(pid);
        s.cpu_ticks += p.cpu_ticks;
        s.cpu_ns += p.cpu_ns;
        s.user_ns += p.user_ns;
        s.system_ns += p.system_ns;
        s.rss_kib += p.rss_kib;
        s.ctx_switches += p.ctx_switches;
    }
    s
}

/// One process's counters.
fn sample_process(pid: u32) -> UsageSample {
    let mut s = UsageSample::default();
    if let Some(f) = stat_fields(pid) {
        // After "pid (comm)": field 3 is index 0, so utime (14) and stime (15) are 11, 12.
        let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        s.cpu_ticks = t(11) + t(12);
        let ns = |ticks: u64| (ticks as f64 * 1e9 / clk_tck()) as u64;
        (s.user_ns, s.system_ns) = (ns(t(11)), ns(t(12)));
    }
    // Anonymous pages only (heap, stacks): the binary's file pages count in VmRSS by how
    // the file came into the page cache (a fresh copy of the same build maps 1.4 MiB more),
    // which read as a memory change between two builds.
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        s.rss_kib = status_value(&status, "RssAnon:");
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(st) = std::fs::read_to_string(t.path().join("status")) {
                s.ctx_switches += status_value(&st, "voluntary_ctxt_switches:")
                    + status_value(&st, "nonvoluntary_ctxt_switches:");
            }
            s.cpu_ns += std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|st| st.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    s
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: split after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn status_value(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Inodes of TCP sockets listening on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9
                && f[3] == "0A"
                && f[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
            {
                out.push(f[9].to_owned());
            }
        }
    }
    out
}

/// The ports ab may give the servers and backends it starts (`--ports FIRST-LAST`, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// Below 32768: outside Linux's default ephemeral range, so that no client connection
    /// holds one of them by chance.
    pub(crate) const DEFAULT: PortRange = PortRange {
        first: 20000,
        last: 31999,
    };
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;

    /// `FIRST-LAST`: ports 1 to 65535, at least two (every server needs a clear and a TLS port).
    fn from_str(s: &str) -> Result<PortRange, String> {
        let port = |p: &str| match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("'{s}': '{p}' is not a port from 1 to 65535")),
        };
        let (first, last) = s
            .split_once('-')
            .ok_or_else(|| format!("'{s}' is not a range: give FIRST-LAST, e.g. 20000-20100"))?;
        let (first, last) = (port(first)?, port(last)?);
        if last <= first {
            return Err(format!(
                "'{s}': the range must hold at least two ports (FIRST < LAST): each server needs a clear and a TLS port"
            ));
        }
        Ok(PortRange { first, last })
    }
}

/// A TCP+UDP port of `range` free on `host` right now, not in `avoid`: every port of the range
/// is tried once, from a starting point drawn from the clock.
pub(crate) fn free_port(host: &str, range: PortRange, avoid: &[u16]) -> Result<u16> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos()) as u64;
    let len = u64::from(range.last - range.first) + 1;
    let start = seed.wrapping_mul(2654435761) % len;
    for i in 0..len {
        let port = range.first + ((start + i) % len) as u16;
        if avoid.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind((host, port)).is_ok()
            && std::net::UdpSocket::bind((host, port)).is_ok()
        {
            return Ok(port);
        }
    }
    bail!("no free port in {range} on {host} (--ports)")
}

/// Clock ticks per second.
#[allow(unsafe_code)] // sysconf
pub(crate) fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

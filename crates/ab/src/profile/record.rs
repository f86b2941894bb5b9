//! A window's profile on the server host: `perf record` samples the server cores (the software
//! `cpu-clock` event, every `PERIOD_NS` of CPU time, with call stacks and kernel frames),
//! enabled and disabled at the window's edges through perf's control FIFO, then `perf script`
//! resolves the symbols while the processes are still alive (a container's binaries through its
//! root file system, which perf reaches from the process's mount namespace) and each sample goes
//! to the server whose process it interrupted, folded by `inferno`.
//!
//! perf keeps a build-id cache of its own in the window's scratch directory (not `~/.debug`):
//! when recording stops it copies there what the samples hit, the vDSO (code that exists only
//! in memory: without the copy, `clock_gettime` has no symbol) and each library's debug file
//! found by its build-id on this host (Debian's `libc6-dbg`). perf looks for a container's
//! debug files inside the container, where there are none; the host's, found by the same
//! build-id, are linked into the cache before `perf script`, which reads the cache from the
//! host.

use crate::contam::cpu_list;
use crate::fixture::Scratch;
use anyhow::{bail, Context, Result};
use inferno::collapse::{perf::Folder, Collapse};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A run's share of a profiled window: its server's folded stacks.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunProfile {
    /// CPU time per sample, µs.
    pub period_us: f64,
    pub stacks: BTreeMap<String, u64>,
}

/// Time between two samples of a busy core: about 4 700 per second, so that a 1 s window of a
/// server using half a core holds over 2 000 of them. A prime number of microseconds: the
/// samples are a timer's, and a period in step with the load's own (ab's clients send on a
/// 250 µs grid) would sample the same phase of every cycle; at 250 µs the samples of a
/// server missed 14% of its CPU.
pub(crate) const PERIOD_NS: u64 = 211_000;

/// How long perf may take to start and answer its first command.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// What a window's samples were, per server asked for (in the order of the ids).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct WindowProfile {
    /// CPU time per sample, µs.
    pub period_us: f64,
    /// Each server's folded stacks ("frame;frame;leaf" → samples), outermost frame first,
    /// kernel frames marked `_[k]`.
    pub stacks: Vec<BTreeMap<String, u64>>,
    /// Samples on the server cores of processes of none of these servers.
    pub other: u64,
}

/// perf recording the server cores, its events disabled until `enable`.
pub(crate) struct PerfSampler {
    child: Child,
    data: PathBuf,
    ctl: std::fs::File,
    ack: std::fs::File,
    scratch: Scratch,
}

fn mkfifo(path: &std::path::Path) -> Result<()> {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .context("cannot run mkfifo")?;
    if !status.success() {
        bail!("mkfifo {} failed", path.display());
    }
    Ok(())
}

/// perf's build-id cache in `scratch`.
fn buildid_dir(scratch: &Scratch) -> PathBuf {
    scratch.path().join("buildid")
}

/// perf with its build-id cache in `scratch`.
fn perf(scratch: &Scratch) -> Command {
    let mut c = Command::new("perf");
    c.arg("--buildid-dir").arg(buildid_dir(scratch));
    c
}

/// Where this host keeps debug files by build-id (Debian's `-dbg` and `-dbgsym` packages).
const HOST_DEBUG_DIR: &str = "/usr/lib/debug/.build-id";

/// Links into perf's build-id cache `cache` the debug files of `debug_dir` (`xx/rest.debug`
/// by build-id) of every cached binary that has none: a container's libraries, whose debug
/// files perf looked for inside the container. Returns how many it linked.
fn link_debug_files(cache: &Path, debug_dir: &Path) -> Result<usize> {
    let index = cache.join(".build-id");
    let Ok(prefixes) = std::fs::read_dir(&index) else {
        return Ok(0);
    };
    let mut linked = 0;
    for prefix in prefixes {
        let prefix = prefix.context("reading perf's build-id cache")?;
        let Ok(ids) = std::fs::read_dir(prefix.path()) else {
            continue;
        };
        for id in ids {
            let id = id.context("reading perf's build-id cache")?;
            // `.build-id/xx/rest` links to the binary's directory, holding `elf` (and `debug`).
            let Ok(entry) = std::fs::canonicalize(id.path()) else {
                continue;
            };
            let host = debug_dir
                .join(prefix.file_name())
                .join(format!("{}.debug", id.file_name().to_string_lossy()));
            if !entry.join("debug").exists() && host.is_file() {
                std::os::unix::fs::symlink(&host, entry.join("debug")).with_context(|| {
                    format!("linking {} into perf's build-id cache", host.display())
                })?;
                linked += 1;
            }
        }
    }
    Ok(linked)
}

impl PerfSampler {
    /// Start perf on `cpus`, its events off; returns once it answers commands.
    pub(crate) fn start(cpus: &[usize]) -> Result<PerfSampler> {
        let scratch = Scratch::new("perf")?;
        let (ctl_path, ack_path) = (scratch.path().join("ctl"), scratch.path().join("ack"));
        mkfifo(&ctl_path)?;
        mkfifo(&ack_path)?;
        // The reading end first, without blocking: perf opens the writing end when it starts.
        let ack = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&ack_path)
            .context("opening perf's ack FIFO")?;
        let data = scratch.path().join("perf.data");
        let log = std::fs::File::create(scratch.path().join("perf.log"))?;
        let child = perf(&scratch)
            .args(["record", "-e", "cpu-clock", "-c"])
            .arg(PERIOD_NS.to_string())
            .args(["-g", "-q", "-D", "-1", "-C"])
            .arg(cpu_list(cpus))
            .arg(format!(
                "--control=fifo:{},{}",
                ctl_path.display(),
                ack_path.display()
            ))
            .arg("-o")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context(
                "cannot run perf (the `perf` tool, Debian's linux-perf, is needed by --profile)",
            )?;
        let t0 = Instant::now();
        let ctl = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&ctl_path)
            {
                Ok(f) => break f,
                Err(_) if t0.elapsed() < START_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => {
                    let log = std::fs::read_to_string(scratch.path().join("perf.log"))
                        .unwrap_or_default();
                    bail!("perf record did not start: {e}; {}", log.trim());
                }
            }
        };
        let mut r = PerfSampler {
            child,
            data,
            ctl,
            ack,
            scratch,
        };
        // A first command answered: perf is past its start-up (which synthesizes every task's
        // mappings, a few hundred ms), so the window's `enable` takes effect at once.
        r.command("disable", START_TIMEOUT)?;
        Ok(r)
    }

    fn command(&mut self, what: &str, timeout: Duration) -> Result<Duration> {
        let mut stale = [0u8; 16];
        while matches!(self.ack.read(&mut stale), Ok(n) if n > 0) {}
        let t0 = Instant::now();
        self.ctl
            .write_all(format!("{what}\n").as_bytes())
            .with_context(|| format!("perf control: {what}"))?;
        let mut got = Vec::new();
        loop {
            let mut buf = [0u8; 16];
            match self.ack.read(&mut buf) {
                Ok(n) if n > 0 => {
                    // perf answers "ack\n" and a NUL.
                    got.extend_from_slice(&buf[..n]);
                    if got.windows(4).any(|w| w == b"ack\n") {
                        // The NUL may come in the next read: drained before the next command.
                        return Ok(t0.elapsed());
                    }
                }
                _ if t0.elapsed() > timeout => {
                    bail!("perf did not acknowledge `{what}` within {timeout:?}")
                }
                _ => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }

    /// Sampling on, at the window's start: how long perf took to acknowledge it.
    pub(crate) fn enable(&mut self) -> Result<Duration> {
        self.command("enable", Duration::from_secs(1))
    }

    pub(crate) fn disable(&mut self) -> Result<Duration> {
        self.command("disable", Duration::from_secs(1))
    }

    /// Stop perf and attribute its samples: `servers[i]` are the pids of server i.
    pub(crate) fn finish(mut self, servers: &[Vec<u32>]) -> Result<WindowProfile> {
        // Its own command ends it as SIGINT would (perf then re-raises the signal it got).
        self.command("stop", Duration::from_secs(1))?;
        let status = self.child.wait().context("waiting for perf record")?;
        if !status.success() && status.signal() != Some(libc::SIGINT) {
            let log =
                std::fs::read_to_string(self.scratch.path().join("perf.log")).unwrap_or_default();
            bail!("perf record failed ({status}): {}", log.trim());
        }
        link_debug_files(&buildid_dir(&self.scratch), Path::new(HOST_DEBUG_DIR))?;
        let out = perf(&self.scratch)
            .args([
                "script",
                "--no-inline",
                "-F",
                "comm,pid,tid,event,ip,sym,dso",
                "-i",
            ])
            .arg(&self.data)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("cannot run perf script")?;
        if !out.status.success() {
            bail!("perf script failed ({})", out.status);
        }
        attribute(&String::from_utf8_lossy(&out.stdout), servers)
    }
}

/// The pid of a `perf script` sample's first line ("comm  PID/TID  event:"): the field before
/// the first colon that has a slash.
fn sample_pid(header: &str) -> Option<u32> {
    let head = header.split(": ").next()?;
    head.split_whitespace()
        .rev()
        .find_map(|w| w.split_once('/'))
        .and_then(|(pid, _)| pid.parse().ok())
}

/// Each sample of `script` (perf script's text, samples separated by blank lines) given to the
/// server whose process it interrupted, and folded per server.
fn attribute(script: &str, servers: &[Vec<u32>]) -> Result<WindowProfile> {
    let mut texts = vec![String::new(); servers.len()];
    let mut other = 0;
    for sample in script.split("\n\n") {
        let sample = sample.trim_start_matches('\n');
        let Some(pid) = sample.lines().next().and_then(sample_pid) else {
            continue;
        };
        match servers.iter().position(|pids| pids.contains(&pid)) {
            Some(i) => {
                texts[i].push_str(sample);
                texts[i].push_str("\n\n");
            }
            // The idle task is not sampled by cpu-clock; anything else is another process.
            None if pid != 0 => other += 1,
            None => {}
        }
    }
    let stacks = texts.iter().map(|t| fold(t)).collect::<Result<Vec<_>>>()?;
    Ok(WindowProfile {
        period_us: PERIOD_NS as f64 / 1e3,
        stacks,
        other,
    })
}

/// perf script text folded into "frame;frame;leaf" → samples (inferno's perf collapser, kernel
/// frames marked).
fn fold(script: &str) -> Result<BTreeMap<String, u64>> {
    let mut opts = inferno::collapse::perf::Options::default();
    opts.annotate_kernel = true;
    opts.annotate_jit = true;
    let mut folded = Vec::new();
    Folder::from(opts)
        .collapse(script.as_bytes(), &mut folded)
        .context("folding the stacks")?;
    let mut out = BTreeMap::new();
    for line in String::from_utf8_lossy(&folded).lines() {
        if let Some((stack, n)) = line.rsplit_once(' ') {
            if let Ok(n) = n.parse::<u64>() {
                *out.entry(stack.to_owned()).or_insert(0) += n;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "loadterm  2881/2901 cpu-clock: \n\tffffffff8206cfb8 tcp_v4_rcv ([kernel.kallsyms])\n\tffffffff81eb1bfe net_rx_action ([kernel.kallsyms])\n\t55d0c0a0 loadterm::spin (/usr/bin/loadterm)\n\t55d0c0b0 main (/usr/bin/loadterm)\n\nloadterm  2881/2902 cpu-clock: \n\t55d0c0a0 loadterm::spin (/usr/bin/loadterm)\n\t55d0c0b0 main (/usr/bin/loadterm)\n\nhaproxy 77/77 cpu-clock: \n\t4000 process_stream (/usr/sbin/haproxy)\n\ncc1 9/9 cpu-clock: \n\t4000 foo (/usr/bin/cc1)\n\n";

    /// A real recording of this process reading the clock: the vDSO's `clock_gettime` has its
    /// symbol.
    #[test]
    fn a_recording_names_the_vdso() {
        if Command::new("perf").arg("version").output().is_err() {
            eprintln!("skipped: no perf (Debian's linux-perf)");
            return;
        }
        let cpus: Vec<usize> = (0..std::thread::available_parallelism().unwrap().get()).collect();
        let mut perf = PerfSampler::start(&cpus).unwrap();
        perf.enable().unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(500) {
            std::hint::black_box(std::time::SystemTime::now());
        }
        perf.disable().unwrap();
        let p = perf.finish(&[vec![std::process::id()]]).unwrap();
        let (vdso, all) = p.stacks[0].iter().fold((0, 0), |(v, a), (s, n)| {
            (v + n * u64::from(s.contains("__vdso_clock_gettime")), a + n)
        });
        assert!(vdso > 0 && all > 10, "{vdso} of {all}: {:?}", p.stacks[0]);
    }

    /// A cache as perf leaves it: a host library with its debug file, a container's library
    /// without one (the host has it), a binary nobody has one for.
    #[test]
    fn host_debug_files_are_linked_for_binaries_without_one() {
        let dir = Scratch::new("debug-files").unwrap();
        let (cache, host) = (dir.path().join("cache"), dir.path().join("host"));
        let entry = |path: &str, id: &str, debug: Option<&str>| {
            let e = cache.join(path).join(id);
            std::fs::create_dir_all(&e).unwrap();
            std::fs::write(e.join("elf"), "elf").unwrap();
            if let Some(d) = debug {
                std::fs::write(e.join("debug"), d).unwrap();
            }
            let index = cache.join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&index).unwrap();
            std::os::unix::fs::symlink(&e, index.join(&id[2..])).unwrap();
            e
        };
        let ours = entry("usr/lib/libssl.so.3", "aa1111", Some("own"));
        let theirs = entry("lib/libc.so.6", "93ac61", None);
        let stripped = entry("bin/loadterm", "77aa00", None);
        for id in ["aa1111", "93ac61"] {
            std::fs::create_dir_all(host.join(&id[..2])).unwrap();
            std::fs::write(
                host.join(&id[..2]).join(format!("{}.debug", &id[2..])),
                "host",
            )
            .unwrap();
        }
        assert_eq!(link_debug_files(&cache, &host).unwrap(), 1);
        let read = |e: &Path| std::fs::read_to_string(e.join("debug")).ok();
        assert_eq!(read(&ours).as_deref(), Some("own"));
        assert_eq!(read(&theirs).as_deref(), Some("host"));
        assert_eq!(read(&stripped), None);
        assert_eq!(link_debug_files(&cache, &host).unwrap(), 0);
        // A recording that hit no binary leaves no index.
        assert_eq!(
            link_debug_files(&dir.path().join("none"), &host).unwrap(),
            0
        );
    }

    #[test]
    fn samples_go_to_their_process_and_fold_with_kernel_frames_marked() {
        let p = attribute(SCRIPT, &[vec![2881], vec![77, 78]]).unwrap();
        assert_eq!(p.other, 1);
        assert_eq!(
            p.stacks[0].get("loadterm;main;loadterm::spin"),
            Some(&1),
            "{:?}",
            p.stacks[0]
        );
        assert_eq!(
            p.stacks[0].get("loadterm;main;loadterm::spin;net_rx_action_[k];tcp_v4_rcv_[k]"),
            Some(&1),
            "{:?}",
            p.stacks[0]
        );
        assert_eq!(p.stacks[1].get("haproxy;process_stream"), Some(&1));
        assert_eq!(
            sample_pid("opt cgu.04 19769/19823 cpu-clock: "),
            Some(19769)
        );
    }
}

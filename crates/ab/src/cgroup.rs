//! The cgroup of each server (and backend) ab starts: made below ab's own cgroup, entered by
//! the command before it runs, read for CPU and memory, emptied and removed when the variant
//! stops. Whatever the command does (forks a daemon and exits, starts a container whose
//! runtime puts it under `--cgroup-parent {cgroup}`), its processes stay inside, so what is
//! read is the variant's whole cost; of a container, its own cgroup's (`Cgroup::follow`),
//! without the runtime's processes. Where no cgroup can be made, the /proc tree under the
//! started process is the fallback (`Accounting::ProcTree`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a variant's CPU and memory were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Accounting {
    /// cgroup v2: `cpu.stat`, `memory.stat` (anon) where the memory controller is enabled.
    CgroupV2,
    /// cgroup v1: `cpuacct.usage` and `cpuacct.stat`, `memory.stat` (total_rss).
    CgroupV1,
    /// The /proc tree under the started process (no cgroup could be made).
    ProcTree,
}

impl std::fmt::Display for Accounting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Accounting::CgroupV2 => "cgroup v2",
            Accounting::CgroupV1 => "cgroup v1",
            Accounting::ProcTree => "/proc tree",
        })
    }
}

/// A cgroup's counters at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub cpu_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    /// Anonymous memory (heap, stacks), KiB; `None` without a memory controller.
    pub anon_kib: Option<u64>,
}

/// The directories of one cgroup, one per hierarchy ab reads.
#[derive(Debug, Serialize, Deserialize)]
struct Dirs {
    /// v2: the one directory; v1: the cpuacct hierarchy's.
    cpu: PathBuf,
    /// The memory controller's directory (v1: its own hierarchy; v2: the same directory,
    /// when the controller is enabled there).
    memory: Option<PathBuf>,
}

/// A cgroup ab made for one process, removed by `remove` (or when dropped; or, by a later ab,
/// from the record its server's scratch directory keeps, `procs::remove_left`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Cgroup {
    accounting: Accounting,
    dirs: Dirs,
    /// Its path inside the CPU hierarchy, as container runtimes take it (`--cgroup-parent`).
    path: String,
    /// A container's own CPU and memory cgroups (below this one, or where a command's own
    /// `--cgroup-parent` put them): a container variant's CPU and memory are its container's,
    /// without its runtime's processes that stay in the variant's cgroup (an attached
    /// `podman run` took 0.7% of a variant's CPU, docs/AB.md). Read, never removed.
    container_cpu: Option<PathBuf>,
    container_memory: Option<PathBuf>,
    #[serde(skip)]
    removed: bool,
}

/// One line of /proc/self/cgroup: hierarchy id, controllers, path.
fn own_cgroups(text: &str) -> Vec<(String, Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let id = f.next()?.to_owned();
            let controllers = f.next()?.split(',').filter(|c| !c.is_empty());
            Some((
                id,
                controllers.map(str::to_owned).collect(),
                f.next()?.to_owned(),
            ))
        })
        .collect()
}

/// cgroup mounts from /proc/self/mountinfo: (mount point, root inside the hierarchy, fs type,
/// super options).
fn cgroup_mounts(text: &str) -> Vec<(PathBuf, String, String, String)> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let left: Vec<&str> = left.split_whitespace().collect();
            let mut right = right.split_whitespace();
            let fstype = right.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let _source = right.next()?;
            Some((
                PathBuf::from(left.get(4)?),
                left.get(3)?.to_string(),
                fstype.to_owned(),
                right.next().unwrap_or("").to_owned(),
            ))
        })
        .collect()
}

/// Where a v1 controller's hierarchy is mounted, and this process's path inside it.
fn v1_dir(controller: &str, own: &str, mounts: &str) -> Option<(PathBuf, String)> {
    let (_, _, path) = own_cgroups(own)
        .into_iter()
        .find(|(id, c, _)| id != "0" && c.iter().any(|c| c == controller))?;
    let (mount, root, _, _) = cgroup_mounts(mounts)
        .into_iter()
        .find(|(_, _, t, opts)| t == "cgroup" && opts.split(',').any(|o| o == controller))?;
    Some((join(&mount, &root, &path), path))
}

/// The v2 hierarchy's mount and this process's path inside it.
fn v2_dir(own: &str, mounts: &str) -> Option<(PathBuf, String)> {
    let (_, _, path) = own_cgroups(own)
        .into_iter()
        .find(|(id, c, _)| id == "0" && c.is_empty())?;
    let (mount, root, _, _) = cgroup_mounts(mounts)
        .into_iter()
        .find(|(_, _, t, _)| t == "cgroup2")?;
    Some((join(&mount, &root, &path), path))
}

/// `path` (inside a hierarchy) under `mount`, which shows the hierarchy from `root`.
fn join(mount: &Path, root: &str, path: &str) -> PathBuf {
    let rel = path
        .strip_prefix(root.trim_end_matches('/'))
        .unwrap_or(path)
        .trim_start_matches('/');
    mount.join(rel)
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `key value` lines (cpu.stat, memory.stat).
fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// A counter file's text; a cgroup that cannot be read is an error, never a zero.
fn read_counters(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// `key`'s value in the `key value` file `path` read as `text`.
fn counter(text: &str, key: &str, path: &Path) -> Result<u64> {
    stat_value(text, key).with_context(|| format!("no `{key}` figure in {}", path.display()))
}

/// CPU of the cgroup at `dir` (its CPU hierarchy's directory): (total, user, system) ns.
fn cpu_ns(dir: &Path, accounting: Accounting) -> Result<(u64, u64, u64)> {
    match accounting {
        Accounting::CgroupV1 => {
            let usage = dir.join("cpuacct.usage");
            let total: u64 = read_counters(&usage)?
                .trim()
                .parse()
                .with_context(|| format!("{} is not a number", usage.display()))?;
            // cpuacct.stat's user and system ticks sum to the runtime (the kernel scales them
            // to it, as for /proc/PID/stat); cpuacct.usage_user and _sys are raw tick counts
            // that fell 35% short of it here.
            let path = dir.join("cpuacct.stat");
            let stat = read_counters(&path)?;
            let (user, system) = (
                counter(&stat, "user", &path)?,
                counter(&stat, "system", &path)?,
            );
            let user = (total as f64 * user as f64 / ((user + system) as f64).max(1.0)) as u64;
            Ok((total, user, total - user))
        }
        Accounting::CgroupV2 => {
            let path = dir.join("cpu.stat");
            let stat = read_counters(&path)?;
            let us = |k| Ok::<_, anyhow::Error>(counter(&stat, k, &path)? * 1000);
            Ok((us("usage_usec")?, us("user_usec")?, us("system_usec")?))
        }
        Accounting::ProcTree => Ok((0, 0, 0)),
    }
}

/// Anonymous memory of the cgroup at `dir` (its memory controller's directory) and its
/// children (a container's runtime makes its own below), KiB.
fn anon_kib(dir: &Path, accounting: Accounting) -> Result<u64> {
    let key = match accounting {
        Accounting::CgroupV1 => "total_rss",
        Accounting::CgroupV2 => "anon",
        Accounting::ProcTree => return Ok(0),
    };
    let path = dir.join("memory.stat");
    Ok(counter(&read_counters(&path)?, key, &path)? / 1024)
}

/// Every pid in the cgroup at `dir` and its children.
fn pids_below(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        out.extend(
            read(&dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok()),
        );
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out
}

impl Cgroup {
    /// A new cgroup named `name` below ab's own, with the accounting asked for (`None`: v1
    /// where the cpuacct controller is on a v1 hierarchy, as on hybrid layouts; else v2).
    /// `Err` says why none could be made, for the report.
    pub(crate) fn create(name: &str, want: Option<Accounting>) -> Result<Cgroup, String> {
        let own = read(Path::new("/proc/self/cgroup")).unwrap_or_default();
        let mounts = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
        let v1 = v1_dir("cpuacct", &own, &mounts);
        let accounting = match want {
            Some(a) => a,
            None if v1.is_some() => Accounting::CgroupV1,
            None => Accounting::CgroupV2,
        };
        let (parent, own_path, memory_parent) = match accounting {
            Accounting::CgroupV1 => {
                let (dir, path) = v1.ok_or("no cgroup v1 hierarchy with the cpuacct controller")?;
                (dir, path, v1_dir("memory", &own, &mounts).map(|(d, _)| d))
            }
            Accounting::CgroupV2 => {
                let (dir, path) = v2_dir(&own, &mounts).ok_or("no cgroup v2 hierarchy")?;
                (dir.clone(), path, Some(dir))
            }
            Accounting::ProcTree => return Err("asked for (--accounting proc-tree)".into()),
        };
        let make = |parent: &Path| -> Result<PathBuf, String> {
            let dir = parent.join(name);
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            Ok(dir)
        };
        let cpu = make(&parent)?;
        let memory = match (accounting, memory_parent) {
            // The memory controller of v2 is there only if ab's own cgroup enabled it for its
            // children; ab changes nothing outside what it made.
            (Accounting::CgroupV2, _) => cpu.join("memory.stat").exists().then(|| cpu.clone()),
            (_, Some(m)) => make(&m).ok(),
            _ => None,
        };
        Ok(Cgroup {
            accounting,
            dirs: Dirs { cpu, memory },
            path: format!("{}/{name}", own_path.trim_end_matches('/')),
            container_cpu: None,
            container_memory: None,
            removed: false,
        })
    }

    pub(crate) fn accounting(&self) -> Accounting {
        self.accounting
    }

    /// Its path inside the CPU hierarchy (`{cgroup}`, for `--cgroup-parent`).
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The `cgroup.procs` files a process writes its pid into to enter this cgroup.
    pub(crate) fn procs_files(&self) -> Vec<CString> {
        let mut dirs = vec![&self.dirs.cpu];
        dirs.extend(self.dirs.memory.iter().filter(|m| **m != self.dirs.cpu));
        dirs.iter()
            .filter_map(|d| CString::new(d.join("cgroup.procs").into_os_string().into_vec()).ok())
            .collect()
    }

    /// Read a container's CPU and memory from the cgroups of its process `pid` from now on.
    /// Returns its CPU cgroup's path where that is outside this one.
    pub(crate) fn follow(&mut self, pid: u32) -> Option<String> {
        let own = read(Path::new(&format!("/proc/{pid}/cgroup")))?;
        let mounts = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
        let (cpu, path, memory) = match self.accounting {
            Accounting::CgroupV1 => {
                let (cpu, path) = v1_dir("cpuacct", &own, &mounts)?;
                (cpu, path, v1_dir("memory", &own, &mounts).map(|(d, _)| d))
            }
            Accounting::CgroupV2 => {
                let (cpu, path) = v2_dir(&own, &mounts)?;
                let memory = cpu.join("memory.stat").exists().then(|| cpu.clone());
                (cpu, path, memory)
            }
            Accounting::ProcTree => return None,
        };
        self.container_memory = memory.or(self.container_memory.take());
        let outside = !cpu.starts_with(&self.dirs.cpu);
        self.container_cpu = Some(cpu);
        outside.then_some(path)
    }

    /// CPU and memory of the variant: its container's where it follows one, else its own.
    pub(crate) fn usage(&self) -> Result<Usage> {
        let dir = self.container_cpu.as_ref().unwrap_or(&self.dirs.cpu);
        let (cpu_ns, user_ns, system_ns) = cpu_ns(dir, self.accounting)?;
        let anon_kib = match self.container_memory.as_ref().or(self.dirs.memory.as_ref()) {
            Some(m) => Some(anon_kib(m, self.accounting)?),
            None => None,
        };
        Ok(Usage {
            cpu_ns,
            user_ns,
            system_ns,
            anon_kib,
        })
    }

    /// Every process in it, and in the container's cgroup it follows.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let mut pids = pids_below(&self.dirs.cpu);
        if let Some(c) = self
            .container_cpu
            .as_ref()
            .filter(|c| !c.starts_with(&self.dirs.cpu))
        {
            pids.extend(pids_below(c));
        }
        pids
    }

    /// Whether it is still there (a record of it may outlive it).
    pub(crate) fn exists(&self) -> bool {
        self.dirs.cpu.exists()
    }

    /// Whether its memory is read from a memory controller (else from its processes).
    pub(crate) fn has_memory(&self) -> bool {
        self.dirs.memory.is_some() || self.container_memory.is_some()
    }

    /// Signal every process of the cgroup (not of the ones it follows: those belong to a
    /// container, stopped through its runtime).
    #[allow(unsafe_code)] // kill
    fn signal_all(&self, sig: libc::c_int) {
        for pid in pids_below(&self.dirs.cpu) {
            // SAFETY: plain kill(2) on a process of a cgroup ab made for its own child.
            unsafe { libc::kill(pid as i32, sig) };
        }
    }

    /// Stop every process left in it (SIGTERM, SIGKILL after `grace`) and remove it, with the
    /// cgroups a container runtime made below it. Also run on drop, so that no exit path
    /// leaves one behind.
    pub(crate) fn remove(mut self, grace: Duration) -> Result<()> {
        self.remove_now(grace)
    }

    fn remove_now(&mut self, grace: Duration) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let seen = pids_below(&self.dirs.cpu);
        if !seen.is_empty() {
            self.signal_all(libc::SIGTERM);
            let t0 = Instant::now();
            while !pids_below(&self.dirs.cpu).is_empty() && t0.elapsed() < grace {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let t0 = Instant::now();
        loop {
            self.signal_all(libc::SIGKILL);
            let mut left = Vec::new();
            for dir in std::iter::once(&self.dirs.cpu).chain(self.dirs.memory.iter()) {
                if let Err(e) = remove_tree(dir) {
                    left.push(format!("{}: {e}", dir.display()));
                }
            }
            if left.is_empty() {
                reap(&seen);
                return Ok(());
            }
            // A killed process leaves its cgroup only once it has been reaped.
            if t0.elapsed() > Duration::from_secs(5) {
                bail!("cannot remove cgroup {}", left.join("; "));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove_now(Duration::from_secs(3)) {
            eprintln!("ab: {e:#}");
        }
    }
}

/// Collect the exit status of those of `pids` that are ab's children: a daemon's processes,
/// orphaned when their parent exited, are (`adopt_orphans`), and would stay zombies until ab
/// exits. Only these pids: a load client's status belongs to the code that waits for it.
#[allow(unsafe_code)] // waitpid
fn reap(pids: &[u32]) {
    for &pid in pids {
        // SAFETY: waitpid on a pid with WNOHANG; ECHILD for a pid that is not ab's child.
        unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
    }
}

/// Make ab the parent of the processes its servers orphan (a daemon's master once the
/// command that started it exits), so that stopping a daemon reaps it too instead of leaving
/// zombies to an init that may not reap them.
#[allow(unsafe_code)] // prctl
pub(crate) fn adopt_orphans() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag; it only changes which process
    // orphans are re-parented to.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Reap every child that has exited: the orphans adopted as subreaper. Only while no started
/// process is running: its `Child` must reap it itself.
#[allow(unsafe_code)] // waitpid
pub(crate) fn reap_orphans() {
    // SAFETY: waitpid with WNOHANG on any child; 0 or -1 (none left) ends the loop.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// Remove `dir` and the cgroups below it, deepest first.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

/// Remove the directories a container runtime made at `path` in the other hierarchies (it
/// takes `--cgroup-parent` as one path for all of them; on v1, ab made it only in cpuacct and
/// memory): only empty ones, at the path of a cgroup ab made.
pub(crate) fn remove_runtime_leftovers(path: &str) {
    let mounts = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
    for (mount, root, _, _) in cgroup_mounts(&mounts) {
        // rmdir(2) refuses a cgroup that still holds a process: only empty ones go.
        let _ = remove_tree(&join(&mount, &root, path));
    }
}

/// Enter the cgroups whose `cgroup.procs` files are `files` (in a child, between fork and
/// exec: open(2) and write(2) only).
#[allow(unsafe_code)] // open, write
pub(crate) fn enter(files: &[CString]) -> std::io::Result<()> {
    for f in files {
        // SAFETY: async-signal-safe calls on a valid NUL-terminated path; "0" means the
        // writing process itself.
        unsafe {
            let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0\n".as_ptr().cast(), 2);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n < 0 {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// Make the cgroup named `name` for one process (the name of its scratch directory, unique to
/// this run of ab); `None`: it is read from its /proc tree (asked for, or no cgroup could be
/// made and none was asked for).
pub(crate) fn for_process(name: &str, want: Option<Accounting>) -> Result<Option<Cgroup>> {
    match Cgroup::create(name, want) {
        Ok(c) => Ok(Some(c)),
        // Asked for explicitly: that is what the user wants, or it is an error.
        Err(why) if want.is_some_and(|w| w != Accounting::ProcTree) => Err(anyhow::anyhow!(why))
            .context(format!(
                "--accounting {}",
                want.map_or(String::new(), |w| w.to_string())
            )),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN_HYBRID: &str =
        "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    const MOUNTS_HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn hybrid_layout_gives_each_controller_its_own_directory() {
        assert_eq!(
            v1_dir("cpuacct", OWN_HYBRID, MOUNTS_HYBRID),
            Some((PathBuf::from("/sys/fs/cgroup/cpuacct"), "/".to_owned()))
        );
        assert_eq!(
            v1_dir("memory", OWN_HYBRID, MOUNTS_HYBRID),
            Some((
                PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"),
                "/process_api/abc".to_owned()
            ))
        );
        assert_eq!(
            v2_dir(OWN_HYBRID, MOUNTS_HYBRID).map(|(d, _)| d),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn pure_v2_and_comounted_v1_are_found() {
        let own = "0::/user.slice/session-1.scope\n";
        let mounts = "25 22 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(v1_dir("cpuacct", own, mounts), None);
        assert_eq!(
            v2_dir(own, mounts).map(|(d, _)| d),
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/session-1.scope"))
        );
        // cpu and cpuacct mounted together; a container that sees its own cgroup as its root.
        let own = "3:cpu,cpuacct:/docker/x\n";
        let mounts =
            "40 31 0:30 /docker/x /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        assert_eq!(
            v1_dir("cpuacct", own, mounts).map(|(d, _)| d),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
    }

    #[test]
    fn stat_files_are_read_by_key() {
        let cpu = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 0\n";
        assert_eq!(stat_value(cpu, "user_usec"), Some(1000));
        assert_eq!(stat_value(cpu, "usage"), None);
        let mem = "cache 4096\nrss 8192\ntotal_rss 16384\n";
        assert_eq!(stat_value(mem, "total_rss"), Some(16384));
    }
}

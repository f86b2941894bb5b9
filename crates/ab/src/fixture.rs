//! What surrounds the measured server: placeholder substitution (one rule for commands and
//! config templates), per-run scratch directories, and backends that run for the whole
//! comparison on their own CPUs and are never measured.

use crate::cgroup::Cgroup;
use crate::procs::{self, ServerProc};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Placeholder → value, applied in order: `{backend_port_2}` before `{backend_port}` would not
/// matter since braces delimit names, but keeping one list keeps one rule.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Vars(Vec<(String, String)>);

impl Vars {
    pub(crate) fn set(&mut self, name: &str, value: impl ToString) {
        let key = format!("{{{name}}}");
        let value = value.to_string();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    pub(crate) fn render(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |t, (k, v)| t.replace(k.as_str(), v))
    }
}

/// A scratch directory for one process (config, logs, pid files, nginx temp paths), removed
/// when dropped.
pub(crate) struct Scratch(PathBuf);

/// How every scratch directory's name begins, followed by its ab's pid.
const PREFIX: &str = "loadterm-ab-";

impl Scratch {
    pub(crate) fn new(tag: &str) -> Result<Scratch> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "{PREFIX}{}-{n}-{}",
            std::process::id(),
            tag.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Its directory's name, `loadterm-ab-PID-N-TAG`: unique to this run of ab, and given to
    /// the process's cgroup too.
    pub(crate) fn name(&self) -> &str {
        self.0
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Remove what an earlier ab (or agent) on this host left, killed (SIGKILL) before it could
/// stop its servers: for each scratch directory or report of a process that is gone, the
/// container, processes and cgroup its server left (`procs::remove_left`), then the directory.
/// Said on stderr.
pub(crate) fn remove_leftovers() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| {
            n.strip_prefix(PREFIX)?
                .split('-')
                .next()?
                .parse::<u32>()
                .ok()
        }) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let path = e.path();
        if path.is_dir() {
            let removed = procs::remove_left(&path);
            if !removed.is_empty() {
                eprintln!(
                    "ab: removed what an earlier ab (pid {pid}, gone) left: {}",
                    removed.join(", ")
                );
            }
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// `{cgroup}`: the cgroup made for the process, for a container runtime's `--cgroup-parent`.
pub(crate) fn set_cgroup(vars: &mut Vars, cgroup: Option<&Cgroup>, command: &str) -> Result<()> {
    match cgroup {
        Some(cg) => vars.set("cgroup", cg.path()),
        None if command.contains("{cgroup}") => bail!(
            "`{command}` uses {{cgroup}}, but no cgroup could be made below ab's own (not root, or no delegation)"
        ),
        None => {}
    }
    Ok(())
}

/// Wait until something answers on `host:port`, and check that it is `server`'s: a process in
/// its cgroup (or /proc tree), or in the container it started; and that all of them run on
/// `cpus`. Returns what ab changed in a container's command and found of it (`ServerProc::located`).
pub(crate) fn wait_ready(
    server: &mut ServerProc,
    host: &str,
    port: u16,
    cpus: &[usize],
) -> Result<Option<String>> {
    let t0 = Instant::now();
    loop {
        if let Some(why) = server.exited() {
            bail!("exited during start-up ({why})");
        }
        if procs::interrupted() {
            bail!("interrupted during start-up");
        }
        if std::net::TcpStream::connect((host, port)).is_ok() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            bail!("did not listen on {host}:{port} within 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let located = server.located();
    if !server.owns_port(port) {
        return Err(crate::contam::Implausible(format!("{host}:{port} is answered by a process outside what ab started and measures (the command's cgroup, or its /proc tree where no cgroup could be made): an already running server or container, or a port shared via SO_REUSEPORT")).into());
    }
    if let Some(pid) = server.unpinned(cpus) {
        bail!(
            "a process of it runs outside the CPUs given ({}), so its cores would be shared: {pid} (a container's own --cpuset-cpus, or a runtime that resets the affinity ab gives: --cpuset-cpus {{server_cpus}} keeps it there)",
            crate::contam::cpu_list(cpus)
        );
    }
    Ok(located)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitution_is_one_rule_for_commands_and_templates() {
        let mut v = Vars::default();
        v.set("host", "127.0.0.1");
        v.set("backend_port", 8000);
        v.set("backend_port_2", 8002);
        v.set("backend_port", 8001);
        assert_eq!(
            v.render("{host}:{backend_port} {backend_port_2} {unknown}"),
            "127.0.0.1:8001 8002 {unknown}"
        );
    }
}

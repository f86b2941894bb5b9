//! `loadterm ab` measures the server wherever it runs: each variant in a cgroup ab makes below
//! its own, a container as users write it (podman and docker; `-d`, `--name`, `--rootfs`, with
//! or without `--cgroup-parent {cgroup}`), a daemon that forks and exits (nginx's default
//! `daemon on;`); and it refuses a server that answers from outside what it started; and it
//! reads cgroup v2 where asked. After every run, finished, refused, failed at start-up,
//! interrupted or killed (then the next ab cleans up): no container, no process and no cgroup
//! left. Needs root (cgroups), podman, docker.io and nginx.

use crate::common;

use common::{ab, cgroups_of, json_file as json, processes_with, root, Dir, AB_SHORT as SHORT};
use serde_json::Value;
use std::process::{Command, Output, Stdio};

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "ab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A successful short ab run with `args` (and `SHORT`): ab's pid (the prefix of the cgroups it
/// made), its stderr, and its JSON report.
fn ab_run(args: &[&str], dir: &Dir) -> (u32, String, Value) {
    let js = dir.file("ab.json");
    let child = Command::new(common::bin())
        .arg("ab")
        .args(args)
        .args(SHORT)
        .arg("--json")
        .arg(&js)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stderr = ok(&child.wait_with_output().unwrap());
    (pid, stderr, json(&js))
}

/// The root file system of a local image holding this build's loadterm and its libraries
/// (nothing can be pulled here), made once per test binary.
fn rootfs() -> &'static std::path::Path {
    static ROOTFS: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    ROOTFS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("loadterm-test-{}-rootfs", std::process::id()));
        let st = Command::new("sh")
            .arg("-c")
            .arg(
                r#"set -e; rm -rf "$1"; mkdir -p "$1/bin"; cp "$2" "$1/bin/loadterm"
                for l in $(ldd "$2" | grep -o '/[^ ]*'); do mkdir -p "$1$(dirname "$l")"; cp -L "$l" "$1$l"; done"#,
            )
            .args(["sh", root.to_str().unwrap(), common::bin()])
            .status()
            .unwrap();
        assert!(st.success(), "building the root file system");
        at_exit(&format!("rm -rf '{}'", root.display()));
        root
    })
}

/// Run `sh -c COMMAND` when the test binary exits (its images and root file system are
/// shared by its tests, so no one test removes them).
#[allow(unsafe_code)] // atexit
fn at_exit(command: &str) {
    static COMMANDS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    extern "C" fn run() {
        for c in COMMANDS.lock().map(|c| c.clone()).unwrap_or_default() {
            let _ = Command::new("sh")
                .args(["-c", &c])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let mut commands = COMMANDS.lock().unwrap();
    if commands.is_empty() {
        // SAFETY: `run` is an extern "C" fn without arguments, as atexit takes.
        unsafe { libc::atexit(run) };
    }
    commands.push(command.to_owned());
}

/// A container runtime the tests drive: podman, or a dockerd of the test's own
/// (`DOCKER_HOST`), with this build's image imported once.
struct Runtime {
    program: &'static str,
    env: Vec<(String, String)>,
    image: String,
}

impl Runtime {
    fn podman() -> Option<&'static Runtime> {
        static PODMAN: std::sync::OnceLock<Option<Runtime>> = std::sync::OnceLock::new();
        PODMAN
            .get_or_init(|| {
                if !common::have_tool("podman") || !common::have_tool("runc") {
                    return None;
                }
                // podman's default ulimits are above this machine's hard limits: lowered by a
                // containers.conf, so that the variants' lines stay as a user writes them.
                let conf = std::env::temp_dir().join(format!(
                    "loadterm-test-{}-containers.conf",
                    std::process::id()
                ));
                std::fs::write(
                    &conf,
                    "[containers]\ndefault_ulimits = [\"nofile=4096:4096\", \"nproc=4096:4096\"]\n",
                )
                .unwrap();
                at_exit(&format!("rm -f '{}'", conf.display()));
                let r = Runtime {
                    program: "podman",
                    env: vec![("CONTAINERS_CONF".into(), conf.display().to_string())],
                    image: format!("localhost/loadterm-abw-{}:latest", std::process::id()),
                };
                r.import();
                Some(r)
            })
            .as_ref()
    }

    /// A dockerd of the test binary's own (its data, socket and pid file in a temporary
    /// directory), stopped when the binary exits.
    fn docker() -> Option<&'static Runtime> {
        static DOCKER: std::sync::OnceLock<Option<Runtime>> = std::sync::OnceLock::new();
        DOCKER
            .get_or_init(|| {
                if !common::have_tool("dockerd") || !common::have_tool("docker") {
                    return None;
                }
                let dir = std::env::temp_dir()
                    .join(format!("loadterm-test-{}-docker", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let sock = format!("unix://{}/docker.sock", dir.display());
                let d = dir.display();
                // Started in the background by `sh`, so that it is not this binary's child (and
                // no zombie once stopped); stopped, and waited for, when the binary exits (it
                // leaves its network namespace's bind mount behind).
                let st = Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "dockerd --data-root={d}/root --exec-root={d}/exec --pidfile={d}/dockerd.pid \
                         --host={sock} --iptables=false --ip6tables=false --bridge=none \
                         >{d}/dockerd.log 2>&1 </dev/null & echo $! >{d}/sh.pid"
                    ))
                    .status()
                    .unwrap();
                assert!(st.success(), "starting dockerd");
                at_exit(&format!(
                    "pid=$(cat '{d}/sh.pid'); kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.1; done; umount '{d}'/exec/netns/*; rm -rf '{d}'"
                ));
                let r = Runtime {
                    program: "docker",
                    env: vec![("DOCKER_HOST".into(), sock)],
                    image: format!("loadterm-abw-{}:latest", std::process::id()),
                };
                let t0 = std::time::Instant::now();
                while !r.cmd().arg("info").output().unwrap().status.success() {
                    assert!(
                        t0.elapsed() < std::time::Duration::from_secs(30),
                        "dockerd did not start: {}",
                        std::fs::read_to_string(dir.join("dockerd.log")).unwrap_or_default()
                    );
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                r.import();
                Some(r)
            })
            .as_ref()
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(self.program);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    fn import(&self) {
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!(
                r#"tar -C "$1" -c . | {} import - "$2" >/dev/null"#,
                self.program
            ))
            .args(["sh", rootfs().to_str().unwrap(), &self.image])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .status()
            .unwrap();
        assert!(st.success(), "{} import", self.program);
        if self.program == "podman" {
            at_exit(&format!("podman rmi -f {}", self.image));
        }
    }

    /// `RUNTIME run OPTIONS IMAGE /bin/loadterm serve …` (with `extra` after it).
    fn variant(&self, options: &str, extra: &str) -> String {
        format!(
            "{} run {options} {} /bin/loadterm serve -t 1 --no-quic -L {{host}}:{{clear_port}}:{{tls_port}}{extra}",
            self.program, self.image
        )
    }

    /// ab, run to its end, in this runtime's environment.
    fn ab(&self, args: &[&str]) -> (u32, Output) {
        let child = Command::new(common::bin())
            .arg("ab")
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        (child.id(), child.wait_with_output().unwrap())
    }

    /// A short successful comparison of `a` and `b`: ab's pid, its stderr, its JSON report.
    fn ab_run(&self, a: &str, b: &str, dir: &Dir) -> (u32, String, Value) {
        let js = dir.file("ab.json");
        let (pid, out) =
            self.ab(&[&["--a", a, "--b", b, "--json", js.to_str().unwrap()], SHORT].concat());
        (pid, ok(&out), json(&js))
    }

    /// Containers that ab process `pid` labelled, running or not.
    fn containers_of(&self, pid: u32) -> Vec<String> {
        let out = self
            .cmd()
            .args(["ps", "-a", "--filter", "label=loadterm-ab", "--format"])
            .arg("{{.ID}} {{.Labels}}")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("loadterm-ab-{pid}-")))
            .map(str::to_owned)
            .collect()
    }

    /// No container, cgroup, process or scratch directory of ab process `pid` is left.
    fn nothing_left(&self, pid: u32) {
        assert_eq!(
            self.containers_of(pid),
            Vec::<String>::new(),
            "containers left behind"
        );
        assert_eq!(
            cgroups_of(pid),
            Vec::<std::path::PathBuf>::new(),
            "cgroups left behind"
        );
        let marker = format!("loadterm-ab-{pid}-");
        assert_eq!(processes_with(&marker), 0, "processes left behind");
        let scratch: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&marker))
            .map(|e| e.path())
            .collect();
        assert_eq!(
            scratch,
            Vec::<std::path::PathBuf>::new(),
            "scratch left behind"
        );
    }
}

/// Every run of a cell measured the server: cgroup accounting, no errors, CPU and memory read.
fn measured(r: &Value) {
    let cell = &r["cells"][0];
    for v in cell["variants"].as_array().unwrap() {
        let acc = v["accounting"].as_str().unwrap_or("none");
        assert!(acc.starts_with("cgroup-"), "{v}");
    }
    for run in cell["runs"].as_array().unwrap() {
        assert_eq!(run["errors"], 0, "{run}");
        // The container's work is in the variant's CPU and memory.
        assert!(run["cpu_us_per_req"].as_f64().unwrap() > 1.0, "{run}");
        assert!(run["rss_peak_mib"].as_f64().unwrap() > 0.1, "{run}");
    }
}

/// Seed 000's experiment in small, in the shape docs/AB.md gives: two container variants,
/// measured in their own cgroups (the container's below the variant's), removed at the end.
#[test]
fn podman_variants_are_measured_in_their_cgroups_and_removed() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let dir = Dir::new("podman");
    let v = rt.variant(
        "--rm --network host --cgroup-parent {cgroup} --cpuset-cpus {server_cpus}",
        "",
    );
    let (pid, stderr, r) = rt.ab_run(&v, &v, &dir);
    measured(&r);
    assert!(stderr.contains("CPU and memory from cgroup"), "{stderr}");
    assert!(!stderr.contains("added --cgroup-parent"), "{stderr}");
    rt.nothing_left(pid);
}

/// Seed 000's own line: `podman run -d --rm --name X --network host IMAGE …`, the same name on
/// both sides. ab adds `--cgroup-parent` and `--cpuset-cpus`, makes the names unique, measures
/// the detached containers through their cgroups and removes them.
#[test]
fn the_seeds_detached_named_containers_are_measured_and_removed() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let dir = Dir::new("podman-seed");
    let v = rt.variant("-d --rm --name haterm-smoke-new --network host", "");
    let (pid, stderr, r) = rt.ab_run(&v, &v, &dir);
    measured(&r);
    assert!(stderr.contains("added --cgroup-parent /"), "{stderr}");
    assert!(
        stderr.contains("container named haterm-smoke-new-loadterm-ab-"),
        "{stderr}"
    );
    assert!(
        stderr.contains("left its container running (detached)"),
        "{stderr}"
    );
    rt.nothing_left(pid);
}

/// An attached `podman run --rm` on an image, without `--cgroup-parent`: measured alike.
#[test]
fn an_image_without_cgroup_parent_is_measured_and_removed() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let dir = Dir::new("podman-plain");
    let v = rt.variant("--rm --network host", "");
    let (pid, stderr, r) = rt.ab_run(&v, &v, &dir);
    measured(&r);
    assert!(stderr.contains("added --cgroup-parent /"), "{stderr}");
    rt.nothing_left(pid);
}

/// `--rootfs DIR` containers (no image), one variant without `--cgroup-parent` and one with
/// its own `{cgroup}`: both measured, neither left, exited or running.
#[test]
fn rootfs_containers_with_and_without_cgroup_parent_leave_nothing() {
    if !root() {
        return;
    }
    let Some(_) = Runtime::podman() else { return };
    let dir = Dir::new("podman-rootfs");
    let serve = "/bin/loadterm serve -t 1 --no-quic -L {host}:{clear_port}:{tls_port}";
    let r = rootfs().display();
    let a = format!("podman run --rm --network host --rootfs {r} {serve}");
    let b = format!("podman run --network host --cgroup-parent {{cgroup}} --rootfs {r} {serve}");
    let (pid, _, report) = Runtime::podman().unwrap().ab_run(&a, &b, &dir);
    measured(&report);
    Runtime::podman().unwrap().nothing_left(pid);
}

/// A container variant ab refuses (its own `--cpuset-cpus` puts it off the server CPUs): the
/// container is removed with the rest.
#[test]
fn a_refused_container_variant_leaves_nothing() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let v = rt.variant("-d --rm --network host --cpuset-cpus 1", "");
    let (pid, out) = rt.ab(&[&["--a", &v, "--b", &v, "--server-cpus", "0"], SHORT].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("runs outside the CPUs given"), "{stderr}");
    rt.nothing_left(pid);
}

/// A container whose server fails at start-up (a bad option), detached and without `--rm`: ab
/// says why and removes the exited container.
#[test]
fn a_container_failing_at_start_up_is_removed() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let v = rt.variant("-d --network host", " --no-such-option");
    let (pid, out) = rt.ab(&[&["--a", &v, "--b", &v], SHORT].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("exited during start-up"), "{stderr}");
    rt.nothing_left(pid);
}

/// The same comparison as seed 000's shape on docker (Debian's docker.io, a dockerd of the test
/// binary's own).
#[test]
fn docker_variants_are_measured_and_removed() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::docker() else { return };
    let dir = Dir::new("docker");
    let v = rt.variant("-d --rm --name smoke --network host", "");
    let (pid, stderr, r) = rt.ab_run(&v, &v, &dir);
    measured(&r);
    assert!(stderr.contains("added --cgroup-parent /"), "{stderr}");
    rt.nothing_left(pid);
}

type StderrLines = std::io::Lines<std::io::BufReader<std::process::ChildStderr>>;

/// ab started with `args` in `rt`'s environment, its stderr read until round 1 is measured
/// (the rest of it returned, to be read on: a closed pipe would fail ab's next line).
fn ab_until_round_1(rt: &Runtime, args: &[&str]) -> (std::process::Child, StderrLines, String) {
    let mut child = Command::new(common::bin())
        .arg("ab")
        .args(args)
        .args(&SHORT[2..])
        .envs(rt.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen += &line;
        seen += "\n";
        if line.contains("] round 1: ") {
            break;
        }
    }
    assert!(seen.contains("] round 1: "), "{seen}");
    (child, lines, seen)
}

/// Ctrl-C in the middle of a container run: the containers are stopped and removed, and so are
/// their processes and every cgroup ab made.
#[test]
fn sigint_during_a_container_run_leaves_nothing_behind() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let v = rt.variant("-d --rm --name int --network host", "");
    let (mut child, lines, seen) = ab_until_round_1(rt, &["--a", &v, "--b", &v, "--rounds", "50"]);
    let pid = child.id();
    assert_eq!(rt.containers_of(pid).len(), 2, "the containers run");
    let st = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{}", rest.join("\n"));
    rt.nothing_left(pid);
}

/// ab killed (SIGKILL) in the middle of a container run leaves its containers running; the
/// next ab removes them, with their cgroups and scratch directories, and says so.
#[test]
fn what_a_killed_ab_left_is_removed_by_the_next() {
    if !root() {
        return;
    }
    let Some(rt) = Runtime::podman() else { return };
    let v = rt.variant("-d --rm --name killed --network host", "");
    let (mut child, _lines, _) = ab_until_round_1(rt, &["--a", &v, "--b", &v, "--rounds", "50"]);
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        rt.containers_of(pid).len(),
        2,
        "the killed ab's containers run on"
    );
    let serve = format!(
        "{} serve -t 1 --no-quic -L {{host}}:{{clear_port}}:{{tls_port}}",
        common::bin()
    );
    let (_, out) = rt.ab(&[&["--a", &serve, "--b", &serve], SHORT].concat());
    let stderr = ok(&out);
    assert!(
        stderr.contains(&format!(
            "removed what an earlier ab (pid {pid}, gone) left: container "
        )),
        "{stderr}"
    );
    rt.nothing_left(pid);
}

/// nginx with its default `daemon on;` forks its master and exits: ab keeps measuring it through
/// its cgroup, says so, and stops it at the end. The same nginx with `daemon off;` is the other
/// variant: the same server, measured the same way.
#[test]
fn a_daemon_is_measured_through_its_cgroup_and_stopped_with_it() {
    if !root() || !common::have_tool("nginx") {
        return;
    }
    let dir = Dir::new("daemon");
    let conf = "master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {
        listen {host}:{clear_port};
        location / { return 200 \"a small body\\n\"; }
    }
}
";
    let (on, off) = (dir.file("on.conf"), dir.file("off.conf"));
    std::fs::write(&on, format!("daemon on;\n{conf}")).unwrap();
    std::fs::write(&off, format!("daemon off;\n{conf}")).unwrap();
    let nginx = "nginx -p {tmp} -e {tmp}/error.log -c {config}";
    let (on, off) = (
        format!("on={}", on.display()),
        format!("off={}", off.display()),
    );
    let (von, voff) = (format!("on={nginx}"), format!("off={nginx}"));
    let (pid, stderr, r) = ab_run(
        &[
            "--config-template",
            &on,
            "--config-template",
            &off,
            "--variant",
            &von,
            "--variant",
            &voff,
            "--url",
            "/",
        ],
        &dir,
    );
    assert!(
        stderr.contains("exited (exit status: 0) and left"),
        "the daemon is noticed: {stderr}"
    );
    for run in r["cells"][0]["runs"].as_array().unwrap() {
        assert_eq!(run["errors"], 0, "{run}");
        assert!(run["cpu_us_per_req"].as_f64().unwrap() > 1.0, "{run}");
    }
    // Every nginx ab started was given a scratch directory named after ab's pid.
    assert_eq!(
        processes_with(&format!("loadterm-ab-{pid}-")),
        0,
        "nginx left running"
    );
    assert_eq!(
        cgroups_of(pid),
        Vec::<std::path::PathBuf>::new(),
        "cgroups left behind"
    );
}

/// A variant whose server leaves the cgroup ab made for it (here it moves itself to the root
/// cgroup; in life: a unit started through systemd, a container started elsewhere) answers
/// from outside what ab measures: refused with exit status 2, no verdict.
#[test]
fn a_server_answering_from_outside_what_ab_started_is_refused() {
    if !root() {
        return;
    }
    let escape = "for f in /sys/fs/cgroup/cpuacct/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do [ -w \"$f\" ] && echo $$ > \"$f\" 2>/dev/null; done;";
    let cmd = format!(
        "{escape} exec {} serve -t 1 --no-quic -L {{host}}:{{clear_port}}:{{tls_port}}",
        common::bin()
    );
    let out = ab(&[&["--a", &cmd, "--b", &cmd][..], SHORT].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refused:"), "{stderr}");
    assert!(
        stderr.contains("outside what ab started and measures"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("verdicts"),
        "no verdict on such data"
    );
}

/// `--accounting cgroup-v2`: CPU from `cpu.stat` of a cgroup made in the v2 hierarchy (on this
/// project's hybrid machines, the controller-less one at /sys/fs/cgroup/unified: CPU is
/// accounted there without a controller, memory then comes from the processes).
#[test]
fn cgroup_v2_accounting_reads_cpu_stat() {
    if !root() {
        return;
    }
    let dir = Dir::new("v2");
    let cmd = format!(
        "{} serve -t 1 --no-quic -L {{host}}:{{clear_port}}:{{tls_port}}",
        common::bin()
    );
    let (pid, stderr, r) = ab_run(
        &["--a", &cmd, "--b", &cmd, "--accounting", "cgroup-v2"],
        &dir,
    );
    assert!(stderr.contains("CPU and memory from cgroup v2"), "{stderr}");
    let cell = &r["cells"][0];
    for v in cell["variants"].as_array().unwrap() {
        assert_eq!(v["accounting"], "cgroup-v2", "{v}");
    }
    for run in cell["runs"].as_array().unwrap() {
        assert!(run["cpu_us_per_req"].as_f64().unwrap() > 1.0, "{run}");
        assert!(run["rss_peak_mib"].as_f64().unwrap() > 0.1, "{run}");
    }
    assert_eq!(
        cgroups_of(pid),
        Vec::<std::path::PathBuf>::new(),
        "cgroups left behind"
    );
}

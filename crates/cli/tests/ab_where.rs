//! `loadterm ab` measures the server wherever it runs: each variant in a cgroup ab makes below
//! its own, a podman container (below that cgroup with `--cgroup-parent {cgroup}`), a daemon
//! that forks and exits (nginx's default `daemon on;`); and it refuses a server that answers
//! from outside what it started; and it reads cgroup v2 where asked. After every run,
//! interrupted or not: no container, no process and no cgroup left. Needs root (cgroups),
//! podman and nginx.

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

/// A local podman image holding this build's loadterm and its libraries (nothing can be
/// pulled here): a root file system imported as an image, removed when dropped.
struct Image(String);

impl Image {
    /// `tag` tells apart the images of tests that run at the same time (a test counts the
    /// containers of its own image).
    fn build(dir: &Dir, tag: &str) -> Option<Image> {
        if !common::have_tool("podman") || !common::have_tool("runc") {
            return None;
        }
        let root = dir.file("rootfs");
        let st = Command::new("sh")
            .arg("-c")
            .arg(
                r#"set -e; mkdir -p "$1/bin"; cp "$2" "$1/bin/loadterm"
                for l in $(ldd "$2" | grep -o '/[^ ]*'); do mkdir -p "$1$(dirname "$l")"; cp -L "$l" "$1$l"; done"#,
            )
            .args(["sh", root.to_str().unwrap(), common::bin()])
            .status()
            .unwrap();
        assert!(st.success(), "building the root file system");
        let name = format!("localhost/loadterm-abw-{}-{tag}:latest", std::process::id());
        let st = Command::new("sh")
            .arg("-c")
            .arg(r#"tar -C "$1" -c . | podman import -q - "$2" >/dev/null"#)
            .args(["sh", root.to_str().unwrap(), &name])
            .status()
            .unwrap();
        assert!(st.success(), "podman import");
        Some(Image(name))
    }

    /// A podman variant running `loadterm serve` (with `extra`), as docs/AB.md gives it.
    fn variant(&self, extra: &str) -> String {
        format!(
            "podman run --runtime runc --rm --network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
             --cgroup-parent {{cgroup}} --cpuset-cpus {{server_cpus}} {} \
             /bin/loadterm serve -t 1 --no-quic -L {{host}}:{{clear_port}}:{{tls_port}}{extra}",
            self.0
        )
    }

    /// Containers of this image, running or not.
    fn containers(&self) -> String {
        let out = Command::new("podman")
            .args([
                "ps",
                "-a",
                "-q",
                "--filter",
                &format!("ancestor={}", self.0),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rmi", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Seed 000's experiment in small: two container variants, measured in their own cgroups (the
/// container's below the variant's), the containers removed at the end.
#[test]
fn podman_variants_are_measured_in_their_cgroups_and_removed() {
    if !root() {
        return;
    }
    let dir = Dir::new("podman");
    let Some(image) = Image::build(&dir, "measured") else {
        return;
    };
    let (a, b) = (image.variant(""), image.variant(""));
    let (pid, stderr, r) = ab_run(&["--a", &a, "--b", &b], &dir);
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
    assert!(stderr.contains("CPU and memory from cgroup"), "{stderr}");
    assert_eq!(image.containers(), "", "containers left behind");
    assert_eq!(
        cgroups_of(pid),
        Vec::<std::path::PathBuf>::new(),
        "cgroups left behind"
    );
}

/// Ctrl-C in the middle of a container run: the containers are stopped and removed, and so are
/// their processes and every cgroup ab made.
#[test]
fn sigint_during_a_container_run_leaves_nothing_behind() {
    if !root() {
        return;
    }
    let dir = Dir::new("podman-int");
    let Some(image) = Image::build(&dir, "interrupted") else {
        return;
    };
    // A marker no other test's servers carry, to find ours in /proc afterwards.
    let marker = format!("{}ms", 6000 + std::process::id() % 1000);
    let variant = image.variant(&format!(" --grace {marker}"));
    let mut child = Command::new(common::bin())
        .args(["ab", "--a", &variant, "--b", &variant, "--rounds", "50"])
        .args(&SHORT[2..])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
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
    assert_ne!(image.containers(), "", "the containers run");
    assert!(!cgroups_of(pid).is_empty(), "ab made cgroups");
    let st = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{}", rest.join("\n"));
    assert_eq!(image.containers(), "", "containers left behind");
    assert_eq!(processes_with(&marker), 0, "processes left behind");
    assert_eq!(
        cgroups_of(pid),
        Vec::<std::path::PathBuf>::new(),
        "cgroups left behind"
    );
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

//! The deployment files, checked as far as a machine without a cluster or a registry can: the
//! Indexed Job manifest against Kubernetes' schemas (kubernetes-validate, offline), the
//! Dockerfile with hadolint, the scripts with shellcheck, and deploy/simulate.sh, which runs the manifest's pod command lines
//! as local processes against the real `loadterm serve` and merges them as run.sh does.

use crate::common;

use common::{have_tool, Server};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loadterm-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run a command")
}

fn validate(file: &Path, version: &str) -> Output {
    run(Command::new("kubernetes-validate")
        .args(["--strict", "-k", version])
        .arg(file))
}

/// The manifest as run.sh renders it.
fn render(dir: &Path, shards: &str, args: &str) -> PathBuf {
    let out = run(Command::new("python3")
        .arg(repo().join("deploy/kubernetes/job.py"))
        .arg("render")
        .arg(repo().join("deploy/kubernetes/job.yaml"))
        .args(["--name", "loadterm-test", "--shards", shards])
        .args([
            "--image",
            "registry.example/loadterm:1",
            "--start-at",
            "1795000000",
        ])
        .args(["--args", args]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.join("job.yaml");
    std::fs::write(&file, &out.stdout).unwrap();
    file
}

#[test]
fn the_job_manifest_validates_against_kubernetes_schemas() {
    if !have_tool("kubernetes-validate") {
        return;
    }
    let dir = scratch("validate");
    let rendered = render(&dir, "7", "-D 10s -c 70 https://target.example/");
    let text = std::fs::read_to_string(&rendered).unwrap();
    assert!(
        text.contains("completions: 7") && text.contains("parallelism: 7"),
        "{text}"
    );
    // The oldest and newest schemas the package ships (Indexed Jobs are GA since 1.24).
    for version in ["1.25.0", "1.37.0"] {
        for file in [repo().join("deploy/kubernetes/job.yaml"), rendered.clone()] {
            let out = validate(&file, version);
            assert!(
                out.status.success(),
                "{} against {version}: {}{}",
                file.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // The check does check: a misspelt field is refused.
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, text.replace("restartPolicy:", "restartPolcy:")).unwrap();
    assert!(!validate(&bad, "1.37.0").status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_dockerfile_passes_hadolint() {
    if !have_tool("hadolint") {
        return;
    }
    let out = run(Command::new("hadolint").arg(repo().join("Dockerfile")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_deploy_scripts_pass_shellcheck() {
    if !have_tool("shellcheck") {
        return;
    }
    let out = run(Command::new("shellcheck").args(
        [
            "deploy/kubernetes/run.sh",
            "deploy/kubernetes/collect.sh",
            "deploy/simulate.sh",
        ]
        .map(|f| repo().join(f)),
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_simulated_job_runs_every_shard_and_merges_them() {
    let s = Server::start(&["-t", "1", "--no-quic"]);
    let dir = scratch("simulate");
    let url = format!("http://127.0.0.1:{}/?s=64", s.clear_port);
    let bin_dir = Path::new(common::bin()).parent().unwrap();
    let out = run(Command::new(repo().join("deploy/simulate.sh"))
        .env("LOADTERM_DIR", bin_dir)
        .args(["-n", "3", "-l", "2", "-o"])
        .arg(&dir)
        .args(["--", "-n", "901", "-c", "5", "-m", "2", &url]));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let json = |f: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap()
    };
    // Each pod read its index from JOB_COMPLETION_INDEX and ran its share (-c 5 in 3: 2, 2, 1
    // connections; -n 901 in proportion).
    for (i, (conns, n)) in [(2, 361), (2, 360), (1, 180)].into_iter().enumerate() {
        let r = json(&format!("shard-{i}.json"));
        assert_eq!(r["shard"]["index"], i as u64);
        assert_eq!(r["shard"]["count"], 3);
        assert_eq!(r["connections"], conns);
        assert_eq!(r["requests"]["completed"], n, "shard {i}");
        assert_eq!(
            r["clock"]["start_at_unix_s"],
            json("shard-0.json")["clock"]["start_at_unix_s"]
        );
    }
    let merged = json("merged.json");
    assert_eq!(merged["requests"]["completed"], 901);
    assert_eq!(merged["status"]["200"], 901);
    assert_eq!(merged["runs"], 3);
    assert_eq!(merged["connections"], 5);
    let hlog = std::fs::read_to_string(dir.join("merged.hlog")).unwrap();
    assert!(hlog.contains("#[BaseTime:"), "{hlog}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("merged from 3 runs"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

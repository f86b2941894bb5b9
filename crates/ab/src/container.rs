//! Container variants: a command that runs `podman run` or `docker run`, as users write it
//! (seed 000: `podman run -d --rm --name X --network host … IMAGE …`). ab reads the runtime's
//! options, adds what it needs to measure and remove the container (`--cidfile`, a
//! `loadterm-ab` label, and where the command has none, `--cgroup-parent` and `--cpuset-cpus`),
//! makes a `--name` unique to the run, and removes the container through its runtime.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The label ab puts on every container it starts; its value is the variant's scratch name
/// (`loadterm-ab-PID-N-TAG`), so that a later ab finds what an earlier one left.
pub(crate) const LABEL: &str = "loadterm-ab";

/// One shell word of a command: its bytes in the command, and its text once unquoted.
#[derive(Debug)]
struct Word {
    span: Range<usize>,
    text: String,
    /// `;`, `&&`, `|`, a newline...: the end of a simple command.
    operator: bool,
}

/// The command's words, as `sh` would split them (quotes and backslashes; no expansion).
fn words(command: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut chars = command.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c == ' ' || c == '\t' {
            chars.next();
            continue;
        }
        if c == '#' {
            while chars.next_if(|&(_, c)| c != '\n').is_some() {}
            continue;
        }
        if matches!(c, ';' | '&' | '|' | '\n' | '(' | ')' | '<' | '>') {
            let mut end = start;
            while let Some((i, c)) =
                chars.next_if(|&(_, c)| matches!(c, ';' | '&' | '|' | '\n' | '(' | ')' | '<' | '>'))
            {
                end = i + c.len_utf8();
            }
            out.push(Word {
                span: start..end,
                text: command[start..end].to_owned(),
                operator: true,
            });
            continue;
        }
        let mut text = String::new();
        let mut end = start;
        let mut quote: Option<char> = None;
        while let Some(&(i, c)) = chars.peek() {
            match (quote, c) {
                (None, ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>') => break,
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), _) if c == q => quote = None,
                (None, '\\') | (Some('"'), '\\') => {
                    chars.next();
                    if let Some(&(j, n)) = chars.peek() {
                        if quote.is_some() && !matches!(n, '"' | '\\' | '$' | '`') {
                            text.push('\\');
                        }
                        text.push(n);
                        end = j + n.len_utf8();
                        chars.next();
                    }
                    continue;
                }
                _ => text.push(c),
            }
            end = i + c.len_utf8();
            chars.next();
        }
        out.push(Word {
            span: start..end,
            text,
            operator: false,
        });
    }
    out
}

/// Options of `run` that take no value (podman's and docker's): every other option takes the
/// next word as its value unless it is written `--opt=value`.
const FLAGS: &[&str] = &[
    "--detach",
    "--rm",
    "--init",
    "--interactive",
    "--tty",
    "--privileged",
    "--publish-all",
    "--read-only",
    "--read-only-tmpfs",
    "--replace",
    "--rootfs",
    "--no-healthcheck",
    "--no-hosts",
    "--oom-kill-disable",
    "--sig-proxy",
    "--quiet",
    "--env-host",
    "--http-proxy",
    "--passwd",
    "--tls-verify",
    "--disable-content-trust",
    "--help",
];

/// One-letter options that take no value: `-d`, `-i`, `-t`, `-P`, `-q`, and together (`-dit`).
const SHORT_FLAGS: &str = "ditPq";

/// A `RUNTIME run` found in a variant's command, and the options of it that ab reads.
#[derive(Debug, PartialEq)]
pub(crate) struct RunCommand {
    /// The runtime and the global options before `run` (`podman --runtime runc`,
    /// `docker -H unix:///…`): how ab asks the same runtime about the container.
    pub runtime: Vec<String>,
    /// Byte offset just after the `run` word, where ab's options go.
    insert_at: usize,
    pub detach: bool,
    pub cgroup_parent: Option<String>,
    pub cpuset_cpus: Option<String>,
    pub cidfile: Option<String>,
    /// `--name`'s value, and where it is written in the command.
    name: Option<(Range<usize>, String)>,
}

impl RunCommand {
    /// The first `podman|docker [global options] [container] run` of `command`, with its options
    /// up to the image (or, with `--rootfs`, the root file system).
    pub(crate) fn parse(command: &str) -> Option<RunCommand> {
        let w = words(command);
        let (at, run) = w.iter().enumerate().find_map(|(i, word)| {
            if word.operator
                || !matches!(
                    word.text.rsplit('/').next(),
                    Some("podman") | Some("docker")
                )
            {
                return None;
            }
            // Global options (each word an option or the value of the one before) up to `run`.
            let mut j = i + 1;
            while let Some(g) = w.get(j) {
                if g.operator {
                    return None;
                }
                if g.text == "run" {
                    return Some((i, j));
                }
                let value_of_option =
                    w[j - 1].text.starts_with('-') && !w[j - 1].text.contains('=') && j > i + 1;
                if !(g.text.starts_with('-') || value_of_option || g.text == "container") {
                    return None;
                }
                j += 1;
            }
            None
        })?;
        let runtime = w[at..run]
            .iter()
            .map(|x| x.text.clone())
            .filter(|t| t != "container")
            .collect();
        let mut cmd = RunCommand {
            runtime,
            insert_at: w[run].span.end,
            detach: false,
            cgroup_parent: None,
            cpuset_cpus: None,
            cidfile: None,
            name: None,
        };
        let mut i = run + 1;
        while let Some(word) = w.get(i) {
            let t = word.text.as_str();
            if word.operator || t == "--" || !t.starts_with('-') || t == "-" {
                break;
            }
            i += 1;
            if let Some(letters) = t.strip_prefix('-').filter(|l| !l.starts_with('-')) {
                if letters.chars().all(|c| SHORT_FLAGS.contains(c)) {
                    cmd.detach |= letters.contains('d');
                } else if letters.len() == 1 {
                    i += 1;
                }
                continue;
            }
            let (opt, inline) = match t.split_once('=') {
                Some((o, v)) => (o, Some(v.to_owned())),
                None => (t, None),
            };
            if FLAGS.contains(&opt) {
                if opt == "--detach" {
                    cmd.detach = inline.as_deref().is_none_or(|v| v == "true");
                }
                continue;
            }
            let (value, span) = match inline {
                Some(v) => {
                    let eq = word.span.start + t.find('=').map_or(0, |p| p + 1);
                    (v, eq..word.span.end)
                }
                None => match w.get(i) {
                    Some(v) if !v.operator => {
                        i += 1;
                        (v.text.clone(), v.span.clone())
                    }
                    _ => break,
                },
            };
            match opt {
                "--cgroup-parent" => cmd.cgroup_parent = Some(value),
                "--cpuset-cpus" => cmd.cpuset_cpus = Some(value),
                "--cidfile" => cmd.cidfile = Some(value),
                "--name" => cmd.name = Some((span, value)),
                _ => {}
            }
        }
        Some(cmd)
    }

    /// `command` with what ab needs: `--cidfile` (unless it has one), the `loadterm-ab=NAME`
    /// label, `--cgroup-parent CGROUP` and `--cpuset-cpus CPUS` where it has neither, and a
    /// `--name` suffixed with `-NAME` (two variants run at once, and one name can be used once).
    /// Returns the command and what ab changed, in words.
    pub(crate) fn adapt(
        &self,
        command: &str,
        cidfile: &Path,
        name: &str,
        cgroup: Option<&str>,
        cpus: &str,
    ) -> (String, Vec<String>) {
        let mut added = Vec::new();
        let mut insert = String::new();
        if self.cidfile.is_none() {
            insert += &format!(" --cidfile {}", cidfile.display());
        }
        insert += &format!(" --label {LABEL}={name}");
        if let (None, Some(cg)) = (&self.cgroup_parent, cgroup) {
            insert += &format!(" --cgroup-parent {cg}");
            added.push(format!("--cgroup-parent {cg}"));
        }
        if self.cpuset_cpus.is_none() && !cpus.is_empty() {
            insert += &format!(" --cpuset-cpus {cpus}");
            added.push(format!("--cpuset-cpus {cpus}"));
        }
        let mut out = String::with_capacity(command.len() + insert.len() + name.len());
        let mut notes = Vec::new();
        if !added.is_empty() {
            notes.push(format!(
                "added {} (the container and its runtime's processes ({} run, conmon) kept in the variant's cgroup and on the server CPUs)",
                added.join(" "),
                self.runtime[0].rsplit('/').next().unwrap_or_default()
            ));
        }
        match &self.name {
            Some((span, given)) if span.start > self.insert_at => {
                let unique = format!("{given}-{name}");
                out += &command[..self.insert_at];
                out += &insert;
                out += &command[self.insert_at..span.start];
                out += &unique;
                out += &command[span.end..];
                notes.push(format!("container named {unique}, not {given} (both variants run at once, and a name can be used once)"));
            }
            _ => {
                out += &command[..self.insert_at];
                out += &insert;
                out += &command[self.insert_at..];
            }
        }
        (out, notes)
    }
}

/// A container ab started: its runtime, and the file its id is written into.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Container {
    runtime: Vec<String>,
    cidfile: PathBuf,
    /// The `loadterm-ab` label's value: finds it when no id was written (yet).
    name: String,
}

impl Container {
    pub(crate) fn new(runtime: Vec<String>, cidfile: PathBuf, name: &str) -> Container {
        Container {
            runtime,
            cidfile,
            name: name.to_owned(),
        }
    }

    /// The runtime's program name (`podman`, `docker`).
    pub(crate) fn runtime_name(&self) -> &str {
        self.runtime[0].rsplit('/').next().unwrap_or_default()
    }

    fn runtime(&self) -> Command {
        let mut cmd = Command::new(&self.runtime[0]);
        cmd.args(&self.runtime[1..])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    pub(crate) fn id(&self) -> Option<String> {
        std::fs::read_to_string(&self.cidfile)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// The container's first process, as its runtime reports it (`None` while it is not
    /// running).
    pub(crate) fn pid(&self) -> Option<u32> {
        let out = self
            .runtime()
            .args(["inspect", "--format", "{{.State.Pid}}"])
            .arg(self.id()?)
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 0)
    }

    /// Every container carrying ab's label with this one's value (running or not).
    fn labelled(&self) -> Vec<String> {
        self.runtime()
            .args(["ps", "-a", "-q", "--no-trunc", "--filter"])
            .arg(format!("label={LABEL}={}", self.name))
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stop and remove the container, running or exited: by its id, or, where none was
    /// written (its `run` stopped before it could, or was killed), by ab's label. Returns the
    /// ids removed.
    pub(crate) fn remove(&self, grace: Duration) -> Vec<String> {
        let ids = match self.id() {
            Some(id) => vec![id],
            None => self.labelled(),
        };
        if ids.is_empty() {
            return ids;
        }
        let grace = grace.as_secs().max(1).to_string();
        // podman's `rm -f -t N` stops the container with SIGTERM and N seconds of grace;
        // docker's `rm` has no -t: `stop -t N` first.
        if self.runtime_name() == "docker" {
            let _ = self
                .runtime()
                .args(["stop", "-t", &grace])
                .args(&ids)
                .stdout(Stdio::null())
                .status();
        }
        let mut rm = self.runtime();
        rm.args(["rm", "-f"]);
        if self.runtime_name() != "docker" {
            rm.args(["-t", &grace]);
        }
        let mut removed = rm
            .args(&ids)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        // A `--rm` container its runtime is already removing: `rm` fails; wait until it is gone.
        let t0 = std::time::Instant::now();
        while !removed && t0.elapsed() < Duration::from_secs(10) {
            let exists = self
                .runtime()
                .args(["inspect", "--format", "{{.Id}}"])
                .args(&ids)
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !exists {
                removed = true;
            } else {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if removed {
            ids
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_keep_their_spans() {
        let c = r#"exec podman run -v "/a b:/mnt:ro" x 'y z' a\ b; echo"#;
        let w = words(c);
        let texts: Vec<&str> = w.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "exec",
                "podman",
                "run",
                "-v",
                "/a b:/mnt:ro",
                "x",
                "y z",
                "a b",
                ";",
                "echo"
            ]
        );
        assert_eq!(&c[w[4].span.clone()], "\"/a b:/mnt:ro\"");
        assert!(w[8].operator);
    }

    /// Seed 000's own line.
    const SEED: &str = r#"podman run -d --rm --name haterm-smoke-new --network host -v /tls:/mnt:ro localhost/bench-hap-own-local:latest /usr/local/sbin/haterm -L "127.0.0.1:18089" -F "bind 127.0.0.1:18452 ssl crt /mnt/combined.pem alpn h2" -d"#;

    #[test]
    fn the_seeds_line_is_read_up_to_its_image() {
        let r = RunCommand::parse(SEED).unwrap();
        assert_eq!(r.runtime, ["podman"]);
        assert!(r.detach);
        assert_eq!(
            r.name.as_ref().map(|n| n.1.as_str()),
            Some("haterm-smoke-new")
        );
        assert_eq!(
            (r.cgroup_parent, r.cpuset_cpus, r.cidfile),
            (None, None, None)
        );
        // The server's own `-d` is not `run`'s.
        let attached = SEED.replacen(" -d --rm", " --rm", 1);
        assert!(!RunCommand::parse(&attached).unwrap().detach);
    }

    #[test]
    fn ab_adds_what_it_needs_and_makes_the_name_unique() {
        let r = RunCommand::parse(SEED).unwrap();
        let (cmd, notes) = r.adapt(
            SEED,
            Path::new("/tmp/d/cid"),
            "loadterm-ab-7-0-A",
            Some("/loadterm-ab-7-0-A"),
            "0",
        );
        assert!(cmd.starts_with("podman run --cidfile /tmp/d/cid --label loadterm-ab=loadterm-ab-7-0-A --cgroup-parent /loadterm-ab-7-0-A --cpuset-cpus 0 -d --rm --name haterm-smoke-new-loadterm-ab-7-0-A --network host -v /tls:/mnt:ro localhost/"), "{cmd}");
        assert!(cmd.ends_with(r#"-F "bind 127.0.0.1:18452 ssl crt /mnt/combined.pem alpn h2" -d"#));
        assert_eq!(notes.len(), 2, "{notes:?}");
        // The user's own choices are kept.
        let own = "podman run --name=x --cgroup-parent {cgroup} --cpuset-cpus=1 --cidfile /c img";
        let r = RunCommand::parse(own).unwrap();
        let (cmd, notes) = r.adapt(own, Path::new("/tmp/d/cid"), "N", Some("/N"), "0");
        assert_eq!(
            cmd,
            "podman run --label loadterm-ab=N --name=x-N --cgroup-parent {cgroup} --cpuset-cpus=1 --cidfile /c img"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn runtimes_with_global_options_and_other_commands() {
        let r = RunCommand::parse("docker -H unix:///tmp/d.sock container run --detach=true img")
            .unwrap();
        assert_eq!(r.runtime, ["docker", "-H", "unix:///tmp/d.sock"]);
        assert!(r.detach);
        let r = RunCommand::parse("exec /usr/bin/podman --runtime runc run --rootfs /r /bin/x -d")
            .unwrap();
        assert_eq!(r.runtime, ["/usr/bin/podman", "--runtime", "runc"]);
        assert!(!r.detach);
        assert!(RunCommand::parse("loadterm serve --run").is_none());
        assert!(RunCommand::parse("podman ps run").is_none());
        assert!(RunCommand::parse("podman; run x").is_none());
    }
}

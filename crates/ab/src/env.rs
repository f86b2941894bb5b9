//! The environment block of a report: what machine, what load, what exact commands.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Environment {
    pub loadterm: String,
    /// This machine's name: where ab and its load clients ran.
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub governor: Option<String>,
    pub boost: Option<String>,
    pub thp: Option<String>,
    pub load_average: String,
    pub command_line: String,
    /// The servers' host, when an agent ran them (`--server-host`); else they ran here.
    pub server_host: Option<ServerHostReport>,
    /// The agents that ran shards of the load besides this machine (`--client-host`).
    pub client_hosts: Vec<String>,
}

/// The agent's host and how its clock was aligned with this one.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ServerHostReport {
    pub agent: String,
    #[serde(flatten)]
    pub facts: HostFacts,
    /// Its clock minus this machine's, and the shortest round trip of the measurement
    /// (the offset is known to ± half of it), milliseconds, when the comparison began.
    pub clock_offset_ms: f64,
    pub round_trip_ms: f64,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The agent's host, for the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostFacts {
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
}

/// What a report says of a host: the same for this one and an agent's.
pub(crate) fn host_facts() -> HostFacts {
    HostFacts {
        hostname: read("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
        kernel: read("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
        cpu_model: read("/proc/cpuinfo")
            .and_then(|c| {
                c.lines().find_map(|l| {
                    l.strip_prefix("model name")
                        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
                })
            })
            .unwrap_or_else(|| "unknown".into()),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

pub(crate) fn capture(
    server_host: Option<ServerHostReport>,
    client_hosts: Vec<String>,
) -> Environment {
    let here = host_facts();
    Environment {
        loadterm: env!("CARGO_PKG_VERSION").into(),
        hostname: here.hostname,
        kernel: here.kernel,
        cpu_model: here.cpu_model,
        cpus: here.cpus,
        governor: read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        boost: read("/sys/devices/system/cpu/cpufreq/boost"),
        thp: read("/sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|s| crate::contam::selected_mode(&s)),
        load_average: read("/proc/loadavg").unwrap_or_default(),
        command_line: std::env::args()
            .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
            .collect::<Vec<_>>()
            .join(" "),
        server_host,
        client_hosts,
    }
}

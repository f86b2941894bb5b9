//! The environment block of a report: what machine, what load, what exact commands.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Environment {
    pub loadterm: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub governor: Option<String>,
    pub boost: Option<String>,
    pub thp: Option<String>,
    pub load_average: String,
    pub command_line: String,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

pub(crate) fn capture() -> Environment {
    let cpu_model = read("/proc/cpuinfo")
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".into());
    Environment {
        loadterm: env!("CARGO_PKG_VERSION").into(),
        kernel: read("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        governor: read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        boost: read("/sys/devices/system/cpu/cpufreq/boost"),
        thp: read("/sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|s| crate::contam::selected_mode(&s)),
        load_average: read("/proc/loadavg").unwrap_or_default(),
        command_line: std::env::args()
            .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

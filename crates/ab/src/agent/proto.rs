//! The agent's protocol: JSON bodies over HTTP/1.1 (over TLS when authenticated), one
//! connection per comparison. Every request is `POST /v1/NAME` with a sequence number one
//! above the last (a replayed or reordered request is refused), the first one `hello`.

use crate::env::HostFacts;
use crate::station::{HostSample, Launch, Launched, LoadWindow, LoadWindowDone, WindowReadings};
use serde::{Deserialize, Serialize};

/// Bumped whenever a request or a reply changes shape: ab and the agent must agree.
pub(crate) const VERSION: u32 = 1;

/// Header carrying the request's sequence number.
pub(crate) const SEQ_HEADER: &str = "x-loadterm-seq";

/// The largest request or reply body (a config template is the largest thing sent).
pub(crate) const MAX_BODY: usize = 4 << 20;

/// What ab asks of the agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub(crate) enum Request {
    /// The first request: both sides' versions must match.
    Hello {
        version: u32,
    },
    /// The agent's clock, for the offset between the hosts.
    Clock,
    Launch(Box<Launch>),
    Sample {
        ids: Vec<u64>,
    },
    /// Readings at `at_unix_s` (the agent's clock) and `duration_s` later.
    Window {
        ids: Vec<u64>,
        at_unix_s: f64,
        duration_s: f64,
        cpu0: usize,
        /// Sample the server cores between the readings (`--profile`).
        #[serde(default)]
        profile: bool,
    },
    Exited {
        id: u64,
    },
    Stop {
        id: u64,
    },
    Settings {
        cpu: usize,
    },
    /// This host's shard of a window's load (`--client-host`).
    Load(Box<LoadWindow>),
}

impl Request {
    /// The request's name, its path's last part.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Clock => "clock",
            Request::Launch(_) => "launch",
            Request::Sample { .. } => "sample",
            Request::Window { .. } => "window",
            Request::Exited { .. } => "exited",
            Request::Stop { .. } => "stop",
            Request::Settings { .. } => "settings",
            Request::Load(_) => "load",
        }
    }
}

/// What the agent answers. Externally tagged: an internally tagged enum buffers its content,
/// and the CPU maps' number keys (strings in JSON) would no longer read as numbers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Reply {
    Welcome {
        version: u32,
        host: HostFacts,
    },
    Clock {
        unix_s: f64,
    },
    Launched(Box<Launched>),
    Sample(HostSample),
    Window(Box<WindowReadings>),
    Exited {
        why: Option<String>,
    },
    Stopped,
    Settings(crate::contam::Settings),
    Loaded(Box<LoadWindowDone>),
    /// The request was understood and failed (the text says why); the session goes on.
    Failed {
        error: String,
    },
}

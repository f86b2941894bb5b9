//! `loadterm agent`: the server host's side of `loadterm ab --server-host`. It starts, pins,
//! reads and stops the variants and backends of one comparison at a time, exactly as ab does
//! on its own machine (`station::Station`), and nothing else.

mod auth;
pub(crate) mod client;
mod proto;
mod serve;
mod wire;

use anyhow::Result;
use loadterm_plan::units::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// Address to listen on. Any address but loopback needs --auth.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Require mutual TLS and the token made by --init in DIR (copy DIR to the ab host and give
    /// it to `loadterm ab --agent-auth DIR`).
    #[arg(long, value_name = "DIR")]
    auth: Option<PathBuf>,
    /// A comparison whose connection is silent this long is over: its processes are stopped
    /// and its cgroups removed.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    lease: Duration,
    /// Make the credentials in DIR and exit: a CA, the agent's certificate (for loopback and
    /// every --name), ab's certificate, and a token.
    #[arg(long, value_name = "DIR", conflicts_with = "auth")]
    init: Option<PathBuf>,
    /// With --init: a host name or address ab will reach the agent at (repeatable).
    #[arg(long = "name", value_name = "HOST", requires = "init")]
    names: Vec<String>,
}

pub fn run(a: AgentArgs) -> Result<()> {
    if let Some(dir) = &a.init {
        auth::init(dir, &a.names)?;
        println!(
            "credentials in {}: start the agent with `loadterm agent --listen ADDR:PORT --auth {0}`, copy ca.pem, ab.pem, ab.key and token to the ab host and give their directory to `loadterm ab --server-host https://ADDR:PORT --agent-auth DIR`",
            dir.display()
        );
        return Ok(());
    }
    let credentials = a.auth.as_deref().map(auth::agent).transpose()?;
    serve::serve(serve::AgentConfig {
        listen: a.listen,
        credentials,
        lease: a.lease,
    })
}

//! `loadterm ab` command line.

#[derive(Debug, clap::Args)]
pub struct AbArgs {}

pub fn run(_args: AbArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}

//! `loadterm load` command line.

#[derive(Debug, clap::Args)]
pub struct LoadArgs {}

pub fn run(_args: LoadArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}

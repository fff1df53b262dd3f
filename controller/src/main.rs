//! `proxy-pool-controller`: parses the command line, loads the config, builds the
//! controller, binds its listeners and runs until SIGTERM / Ctrl-C. Composition only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::Context;
use clap::{Parser, Subcommand};
use proxy_pool_controller::{Controller, Exit, Listeners, shutdown};
use proxy_pool_runtime::telemetry::logging::{self, FORMAT_ENV, LogFormat, Stream};

#[derive(Debug, Parser)]
#[command(
    name = "proxy-pool-controller",
    version,
    about = "Proxy Pool controller"
)]
struct Cli {
    /// Log line format: `text` or `json` (one JSON object per line).
    #[arg(long, global = true, env = FORMAT_ENV, default_value = "text", value_parser = LogFormat::from_str)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller.
    Run {
        /// Config file (YAML).
        #[arg(long)]
        config: PathBuf,
    },
    /// Check a config file and print every problem.
    ValidateConfig {
        /// Config file (YAML).
        file: PathBuf,
    },
    /// Apply the usage analytics SQL migrations to the database of `analytics.dsnFile`
    /// (idempotent). `run` never migrates: it refuses to start analytics on a database
    /// without the current schema.
    Migrate {
        /// Config file (YAML) with `analytics.enabled: true`.
        #[arg(long)]
        config: PathBuf,
    },
    /// Read a password from standard input (one line) and print it as a Basic client's
    /// `passwordHash` (`sha256:<salt>:<digest>`, a fresh random salt each time).
    HashPassword,
}

fn load(path: &PathBuf) -> anyhow::Result<proxy_pool_api::config::Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // Client credentials referenced by file are read and hashed here, once.
    let config = proxy_pool_api::config::load_yaml_with_files(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    // What only the controller can check (the analytics time zone).
    let more = proxy_pool_controller::compose::check_usage(&config);
    if !more.is_empty() {
        anyhow::bail!(
            "{}: {} problem(s) in the configuration\n  - {}",
            path.display(),
            more.len(),
            more.join("\n  - ")
        );
    }
    Ok(config)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::ValidateConfig { file } => match load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e:#}");
                ExitCode::from(2)
            }
        },
        Command::HashPassword => {
            let mut line = String::new();
            let read = std::io::stdin().read_line(&mut line);
            let password = line.strip_suffix('\n').unwrap_or(&line);
            let password = password.strip_suffix('\r').unwrap_or(password);
            match read {
                Ok(_) if !password.is_empty() => {
                    println!(
                        "{}",
                        proxy_pool_controller::distribution::hash_password(password)
                    );
                    ExitCode::SUCCESS
                }
                Ok(_) => {
                    eprintln!("hash-password: no password on standard input");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("hash-password: reading standard input: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Migrate { config } => {
            match init_logging(cli.log_format, Stream::Stderr).and_then(|()| migrate(config)) {
                Ok(()) => {
                    println!("analytics schema is current");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run { config } => {
            if let Err(e) = init_logging(cli.log_format, Stream::Stdout) {
                eprintln!("{e:#}");
                return ExitCode::from(2);
            }
            match run(config) {
                Ok(Exit::Signal) => ExitCode::SUCCESS,
                // Deposed: restart as a follower (Kubernetes / systemd restart on failure).
                Ok(Exit::Deposed) => ExitCode::from(3),
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "controller failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Installs the log subscriber (`RUST_LOG`, default `info`).
fn init_logging(format: LogFormat, stream: Stream) -> anyhow::Result<()> {
    logging::init(format, stream).context("starting logging")
}

#[tokio::main]
async fn run(path: PathBuf) -> anyhow::Result<Exit> {
    let config = load(&path)?;
    let listeners = Listeners::bind(&config)
        .await
        .context("binding listeners")?;
    // In a pod: its name from the downward API (the chart sets it).
    let pod = std::env::var("PROXY_POOL_POD_NAME")
        .ok()
        .filter(|p| !p.is_empty());
    let controller = Controller::build_in_pod(config, pod)
        .await
        .context("building the controller")?;
    Ok(controller.run(listeners, shutdown::signal()).await)
}

#[tokio::main]
async fn migrate(path: PathBuf) -> anyhow::Result<()> {
    let config = load(&path)?;
    proxy_pool_controller::compose::migrate(&config)
        .await
        .context("migrating the analytics database")
}

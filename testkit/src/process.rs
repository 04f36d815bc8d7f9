//! The real binary as a process of its own: a free port, its config on that port, `serve`, and
//! waiting until it is ready.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `toml` (which says `listen = "127.0.0.1:0"`) listening on `port` instead.
pub fn listening_on(toml: &str, port: u16) -> String {
    toml.replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    )
}

/// `bin serve --config <config>`, killed when dropped. Its stdin, stdout and stderr go nowhere
/// unless the caller says otherwise.
pub fn serve(bin: &Path, config: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("serve")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Asks `{url}/readyz` every `every`, up to `attempts` times, until it answers 2xx; false if it
/// never does.
pub async fn wait_ready(url: &str, attempts: u32, every: Duration) -> bool {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    for _ in 0..attempts {
        if http
            .get(format!("{url}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return true;
        }
        tokio::time::sleep(every).await;
    }
    false
}

/// The last `n` lines of a log file (empty if it cannot be read).
pub fn log_tail(path: &Path, n: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

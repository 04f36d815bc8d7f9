//! A Postgres server of a test's own (initdb in a temporary directory, on a free loopback port),
//! for tests that stop and start the server: the shared one on 5432 serves every other test.
//!
//! The binaries come from `MCP_CONNECT_PG_BIN` or the newest `/usr/lib/postgresql/*/bin`
//! (Debian's packages). initdb and the server refuse to run as root: as root (this machine,
//! CI) they run as the `postgres` user through `runuser`, in a directory that user owns.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

pub struct PrivatePostgres {
    /// `postgres://postgres@127.0.0.1:PORT` (append `/dbname`).
    pub base_url: String,
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    /// Server settings (`-c name=value`) beyond the test defaults.
    settings: Vec<String>,
}

fn pg_bin() -> Result<PathBuf, String> {
    if let Ok(b) = std::env::var("MCP_CONNECT_PG_BIN") {
        return Ok(PathBuf::from(b));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("/usr/lib/postgresql: {e} (set MCP_CONNECT_PG_BIN)"))?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|f| f.1)
        .ok_or_else(|| "no /usr/lib/postgresql/*/bin/initdb (set MCP_CONNECT_PG_BIN)".into())
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// `program args...`, as the `postgres` user when we are root.
fn as_owner(program: &Path, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

async fn run(mut c: Command, what: &str) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl PrivatePostgres {
    /// initdb and start; the server accepts connections when this returns.
    pub async fn start() -> Result<PrivatePostgres, String> {
        Self::start_with(&[]).await
    }

    /// `start`, with server settings (`"synchronous_standby_names='*'"`).
    pub async fn start_with(settings: &[&str]) -> Result<PrivatePostgres, String> {
        let pg = Self::empty(settings).await?;
        let data = pg.dir.join("data");
        run(
            as_owner(
                &pg.bin.join("initdb"),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            ),
            "initdb",
        )
        .await?;
        pg.start_server().await?;
        Ok(pg)
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started; it replicates
    /// synchronously when the primary's `synchronous_standby_names` names it (`'*'`).
    pub async fn standby_of(
        primary: &PrivatePostgres,
        settings: &[&str],
    ) -> Result<PrivatePostgres, String> {
        let pg = Self::empty(settings).await?;
        let data = pg.dir.join("data");
        let port = primary.port.to_string();
        run(
            as_owner(
                &pg.bin.join("pg_basebackup"),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-X",
                    "stream",
                    "-R",
                    "--no-sync",
                ],
            ),
            "pg_basebackup",
        )
        .await?;
        pg.start_server().await?;
        Ok(pg)
    }

    /// A directory for a server, owned by the user that runs it, and a free port.
    async fn empty(settings: &[&str]) -> Result<PrivatePostgres, String> {
        let bin = pg_bin()?;
        let dir =
            std::env::temp_dir().join(format!("mcp-connect-pg-{}", crate::harness::random_name()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.args(["postgres:postgres"]).arg(&dir);
                    c
                },
                "chown",
            )
            .await?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        Ok(PrivatePostgres {
            base_url: format!("postgres://postgres@127.0.0.1:{port}"),
            dir,
            bin,
            port,
            settings: settings.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    /// Promotes a standby to primary (`pg_ctl promote`), waiting until it accepts writes.
    pub async fn promote(&self) -> Result<(), String> {
        run(
            self.pg_ctl(&["-w", "-t", "30", "promote"]),
            "pg_ctl promote",
        )
        .await
    }

    /// Kills the server as a crash would (`pg_ctl stop -m immediate`): nothing is flushed or
    /// handed on.
    pub async fn crash(&self) -> Result<(), String> {
        run(
            self.pg_ctl(&["-w", "-m", "immediate", "stop"]),
            "pg_ctl stop -m immediate",
        )
        .await
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let data = self.dir.join("data");
        let mut all = vec!["-D", data.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut c = as_owner(&self.bin.join("pg_ctl"), &all);
        c.stdout(Stdio::null());
        c
    }

    /// Starts the server (again) on its port and waits until it accepts connections.
    pub async fn start_server(&self) -> Result<(), String> {
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=120",
            self.port,
            self.dir.display()
        );
        for s in &self.settings {
            opts.push_str(&format!(" -c {s}"));
        }
        let log = self.dir.join("server.log");
        run(
            self.pg_ctl(&[
                "-w",
                "-t",
                "30",
                "-l",
                log.to_str().unwrap(),
                "-o",
                &opts,
                "start",
            ]),
            "pg_ctl start",
        )
        .await
        .map_err(|e| format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default()))
    }

    /// `pg_ctl stop -m fast`: sessions are ended, the server shuts down cleanly.
    pub async fn stop_server(&self) -> Result<(), String> {
        run(
            self.pg_ctl(&["-w", "-t", "30", "-m", "fast", "stop"]),
            "pg_ctl stop",
        )
        .await
    }

    /// Stops the server at once and removes its directory.
    pub async fn remove(self) {
        let _ = self
            .pg_ctl(&["-w", "-m", "immediate", "stop"])
            .stderr(Stdio::null())
            .status()
            .await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub async fn wait_until_gone(&self) {
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

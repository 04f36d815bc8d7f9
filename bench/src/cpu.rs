//! CPU time over a measured window, read from `/proc`: a whole process (haproxy, the release
//! binary), some of this process's threads by name (the server runtime, the load generator,
//! the upstream), the children this process has waited for (wrk), and the whole machine.
//!
//! Divided by the requests served in the window, it says what one request cost each party, in
//! user and kernel time. On a machine whose two cores every party shares, throughput moves with
//! whatever else runs; what a request costs moves much less, and it says where a ratio's gap
//! is: in the forwarder, in the kernel, or in the load generator.

/// User and kernel CPU seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub user: f64,
    pub system: f64,
}

impl Cpu {
    /// What was spent between `earlier` and `self`.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: (self.user - earlier.user).max(0.0),
            system: (self.system - earlier.system).max(0.0),
        }
    }

    /// Microseconds per request, user + kernel, for `requests` served.
    pub fn per_request_us(&self, requests: u64) -> (f64, f64) {
        let n = requests.max(1) as f64;
        (self.user * 1e6 / n, self.system * 1e6 / n)
    }
}

/// Whose CPU time is read.
#[derive(Clone, Copy, Debug)]
pub enum Meter {
    /// A process, every thread of it.
    Process(u32),
    /// This process's threads whose name starts with one of these (the main thread's name is
    /// the executable's: `mcp-connect-ben`).
    Threads(&'static [&'static str]),
    /// Every waited-for child of this process (`getrusage(RUSAGE_CHILDREN)`).
    Children,
    /// Every CPU of the machine, busy time only (`/proc/stat`, idle and iowait left out).
    Machine,
}

impl Meter {
    pub fn read(&self) -> Cpu {
        match *self {
            Meter::Process(pid) => stat(&format!("/proc/{pid}/stat"))
                .map(|(_, c)| c)
                .unwrap_or_default(),
            Meter::Threads(names) => {
                let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
                    return Cpu::default();
                };
                dir.flatten()
                    .filter_map(|t| stat(&t.path().join("stat").to_string_lossy()))
                    .filter(|(comm, _)| names.iter().any(|n| comm.starts_with(n)))
                    .fold(Cpu::default(), |a, (_, c)| Cpu {
                        user: a.user + c.user,
                        system: a.system + c.system,
                    })
            }
            Meter::Children => children(),
            Meter::Machine => machine(),
        }
    }
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// A `/proc/.../stat` line's name and CPU time (fields 14 and 15, after the parenthesised
/// name, which may itself hold spaces and parentheses).
fn stat(path: &str) -> Option<(String, Cpu)> {
    let s = std::fs::read_to_string(path).ok()?;
    let (open, close) = (s.find('(')?, s.rfind(')')?);
    let comm = s.get(open + 1..close)?.to_owned();
    // After ") ": field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let rest: Vec<&str> = s.get(close + 2..)?.split_whitespace().collect();
    let tick = ticks_per_second();
    let field = |i: usize| rest.get(i)?.parse::<f64>().ok();
    Some((
        comm,
        Cpu {
            user: field(11)? / tick,
            system: field(12)? / tick,
        },
    ))
}

fn children() -> Cpu {
    // SAFETY: `usage` is a zeroed rusage owned by this frame, which getrusage fills in.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) != 0 {
            return Cpu::default();
        }
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Cpu {
        user: secs(usage.ru_utime),
        system: secs(usage.ru_stime),
    }
}

/// `/proc/stat`'s first line: user nice system idle iowait irq softirq steal ...
fn machine() -> Cpu {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
        return Cpu::default();
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    let tick = ticks_per_second();
    Cpu {
        user: (at(0) + at(1)) / tick,
        system: (at(2) + at(5) + at(6) + at(7)) / tick,
    }
}

/// The meters' readings now.
pub fn read_all(meters: &[Meter]) -> Vec<Cpu> {
    meters.iter().map(Meter::read).collect()
}

/// What each meter spent since `before`.
pub fn spent(meters: &[Meter], before: &[Cpu]) -> Vec<Cpu> {
    meters
        .iter()
        .zip(before)
        .map(|(m, b)| m.read().since(*b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_thread_and_the_machine_count_cpu_spent() {
        let meters = [Meter::Threads(&["cpu-test-busy"]), Meter::Machine];
        let before = read_all(&meters);
        std::thread::Builder::new()
            .name("cpu-test-busy".into())
            .spawn(move || {
                let t = std::time::Instant::now();
                let mut x = 0u64;
                while t.elapsed() < std::time::Duration::from_millis(300) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                // Read while the thread still exists: a finished thread leaves the task list.
                let spent = spent(&meters, &before);
                let total = |c: &Cpu| c.user + c.system;
                assert!(total(&spent[0]) >= 0.1, "busy thread: {spent:?}");
                assert!(total(&spent[1]) >= total(&spent[0]) - 0.02, "{spent:?}");
            })
            .unwrap()
            .join()
            .unwrap();
    }
}

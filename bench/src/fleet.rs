//! Copies of one function under the Runtime API emulator, and what their processes cost: the
//! benchmarks' fleet.

use std::time::Duration;

use claimonce_local::runtime_api::{Outcome, RuntimeApi};

/// (run time in ns, voluntary context switches) of every thread of process `pid`.
pub fn usage(pid: u32) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for task in tasks.flatten() {
        let (ns, switches) = task_usage(&task.path());
        total.0 += ns;
        total.1 += switches;
    }
    total
}

/// (run time in ns, voluntary context switches) of the thread whose `/proc` directory is
/// `task`.
pub fn task_usage(task: &std::path::Path) -> (u64, u64) {
    let ns = std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let switches = std::fs::read_to_string(task.join("status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    (ns, switches)
}

/// True when the invocation answered a payload holding `needle`.
pub fn status_is(
    outcome: &Result<Outcome, claimonce_local::runtime_api::InvokeError>,
    needle: &[u8],
) -> bool {
    matches!(outcome, Ok(Outcome::Response(p)) if p.windows(needle.len()).any(|w| w == needle))
}

/// N copies of one function, each under its own emulator.
pub struct Fleet {
    /// Each copy's emulator.
    pub apis: Vec<std::sync::Arc<RuntimeApi>>,
    children: Vec<tokio::process::Child>,
    /// Each copy's process id.
    pub pids: Vec<u32>,
}

impl Fleet {
    /// `processes` copies of function `name`, each started by `spawn` under its own emulator.
    pub async fn start(
        name: &str,
        processes: u64,
        spawn: impl Fn(&RuntimeApi) -> tokio::process::Child,
    ) -> Self {
        let mut fleet = Fleet {
            apis: Vec::new(),
            children: Vec::new(),
            pids: Vec::new(),
        };
        for _ in 0..processes {
            let api = RuntimeApi::start(name).await.expect("api");
            let child = spawn(&api);
            fleet.pids.extend(child.id());
            fleet.children.push(child);
            fleet.apis.push(std::sync::Arc::new(api));
        }
        fleet
    }

    /// CPU (ns) and voluntary wakeups of every copy, summed.
    pub fn usage(&self) -> (u64, u64) {
        self.pids
            .iter()
            .map(|pid| usage(*pid))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// Sends `events`, shared out over the copies, each copy one at a time; returns how many
    /// did not get their status.
    pub async fn send(&self, events: Vec<(String, &'static [u8])>) -> u64 {
        let copies = self.apis.len();
        let mut shares: Vec<Vec<(String, &'static [u8])>> = vec![Vec::new(); copies];
        for (i, event) in events.into_iter().enumerate() {
            if let Some(share) = shares.get_mut(i % copies) {
                share.push(event);
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (api, share) in self.apis.iter().zip(shares) {
            let api = std::sync::Arc::clone(api);
            tasks.spawn(async move {
                let mut failures = 0;
                for (e, expected) in share {
                    if !status_is(&api.invoke(e, Duration::from_secs(10)).await, expected) {
                        failures += 1;
                    }
                }
                failures
            });
        }
        let mut failures = 0;
        while let Some(done) = tasks.join_next().await {
            failures += done.unwrap_or(1);
        }
        failures
    }

    /// SIGTERM first, so a profiler the function runs under writes its data, then SIGKILL for
    /// whatever has not gone within five seconds.
    pub async fn stop(mut self) {
        for pid in &self.pids {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        for child in &mut self.children {
            if tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

/// Established TCP connections of the processes `pids` to the loopback port `port`: their
/// sockets (`/proc/<pid>/fd`) matched to the kernel's table (`/proc/net/tcp`).
pub fn connections_to(pids: &[u32], port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if let Some(inode) = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let remote = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // remote address, state (01: established), inode.
            matches!(fields.as_slice(), [_, _, to, "01", _, _, _, _, _, inode, ..]
                if to.ends_with(&remote) && inodes.contains(*inode))
        })
        .count()
}

/// A TCP relay on a free loopback port to `upstream`, each chunk delayed by `one_way` in each
/// direction: a network with twice that round trip before the server, where loopback has next
/// to none. Its port.
pub async fn delaying_relay(upstream: u16, one_way: Duration) -> std::io::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (from_client, to_client) = client.into_split();
                let (from_server, to_server) = server.into_split();
                tokio::join!(
                    delayed(from_client, to_server, one_way),
                    delayed(from_server, to_client, one_way)
                );
            });
        }
    });
    Ok(port)
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, in order.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks, mut due) = tokio::sync::mpsc::unbounded_channel();
    let read = async move {
        let mut buffer = vec![0; 65536];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            let chunk = buffer.get(..n).unwrap_or_default().to_vec();
            if chunks
                .send((tokio::time::Instant::now() + delay, chunk))
                .is_err()
            {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

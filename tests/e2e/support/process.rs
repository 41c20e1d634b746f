//! Starts the control plane's processes so that none of them outlives the test binary.
//!
//! Every child is forked from one keeper thread that lives as long as the process and asks
//! the kernel to kill the child when that thread's process dies (`PR_SET_PDEATHSIG`), so a
//! test binary that panics, aborts or is killed leaves nothing running. On a normal exit an
//! `atexit` handler stops the children gracefully and removes their working folders.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

struct Registry {
    children: Vec<Child>,
    folders: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { children: Vec::new(), folders: Vec::new() });
static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();

fn keeper() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("control-plane-keeper".into())
            .spawn(move || {
                // This thread must never end: the kernel sends the death signal when the
                // thread that forked a child exits, not only when the whole process does.
                for (mut command, reply) in rx {
                    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of ours.
                    unsafe {
                        command.pre_exec(|| {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            if libc::getppid() == 1 {
                                // The parent died between fork and prctl.
                                libc::_exit(1);
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(command.spawn());
                }
                loop {
                    std::thread::park();
                }
            })
            .expect("failed to start the control-plane keeper thread");
        // SAFETY: registering a plain extern "C" function with atexit has no preconditions.
        unsafe {
            libc::atexit(stop_everything);
        }
        Mutex::new(tx)
    })
}

/// Spawns `command` as a child that dies with the test process; returns its pid.
pub fn spawn(command: Command) -> std::io::Result<u32> {
    let (reply_tx, reply_rx) = mpsc::channel();
    keeper()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, reply_tx))
        .expect("control-plane keeper thread is gone");
    let child = reply_rx.recv().expect("control-plane keeper thread is gone")?;
    let pid = child.id();
    registry().children.push(child);
    Ok(pid)
}

/// Whether the child with this pid is still running.
pub fn is_running(pid: u32) -> bool {
    let mut registry = registry();
    registry.children.iter_mut().find(|c| c.id() == pid).is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

/// Removes `folder` when the test binary exits normally.
pub fn remove_at_exit(folder: PathBuf) {
    registry().folders.push(folder);
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn stop_everything() {
    let mut registry = registry();
    // Stop in reverse start order, each child once those started after it are gone: the API
    // server's clients, then the API server, then etcd. Stopped together, the API server
    // waits on an etcd that is closing, and the last of them is only killed at the deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    for child in registry.children.iter_mut().rev() {
        // SAFETY: sending a signal to our own child has no memory-safety preconditions.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    for folder in registry.folders.drain(..) {
        let _ = std::fs::remove_dir_all(folder);
    }
}

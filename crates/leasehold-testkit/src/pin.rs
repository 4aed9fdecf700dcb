//! Which CPUs the servers this process starts run on: a benchmark on a
//! small machine pins every server to one CPU and itself to another, so
//! that a round trip costs the same from one run to the next.

use std::fs;
use std::io;
use std::sync::Mutex;

/// The CPUs every server started from now on is bound to, or `None` for
/// wherever the kernel puts it.
static SERVER_CPUS: Mutex<Option<Vec<usize>>> = Mutex::new(None);

/// Binds every server this process starts from now on (standalone,
/// cluster nodes, replicas, sentinels, and restarts of any of them) to
/// `cpus`; an empty list undoes it. Servers already running keep their
/// CPUs.
///
/// Fails, binding nothing, when a CPU is not one this machine's CPU masks
/// can name.
pub fn pin_servers_to(cpus: &[usize]) -> io::Result<()> {
    cpu_set(cpus)?;
    let mut pinned = SERVER_CPUS.lock().unwrap_or_else(|e| e.into_inner());
    *pinned = (!cpus.is_empty()).then(|| cpus.to_vec());
    Ok(())
}

/// Binds the calling thread, and every thread it starts from now on, to
/// `cpus` (call it first thing in `main` to bind a whole process).
pub fn pin_current_thread_to(cpus: &[usize]) -> io::Result<()> {
    let set = cpu_set(cpus)?;
    set_affinity(&set)
}

/// The CPUs process `pid` may run on, as Linux lists them (`0`, `0-1`,
/// `0,2`), from `/proc/<pid>/status`.
pub fn cpus_allowed(pid: u32) -> io::Result<String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_owned())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/status has no Cpus_allowed_list line"),
            )
        })
}

/// The CPU set servers are to be bound to, built before a fork (nothing
/// may allocate between fork and exec).
pub(crate) fn server_cpu_set() -> Option<libc::cpu_set_t> {
    let pinned = SERVER_CPUS.lock().unwrap_or_else(|e| e.into_inner());
    pinned.as_deref().and_then(|cpus| cpu_set(cpus).ok())
}

fn cpu_set(cpus: &[usize]) -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let limit = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is beyond what a CPU mask names ({limit})"),
            ));
        }
        // SAFETY: `cpu` is within the set, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    Ok(set)
}

/// Binds the calling thread (after a fork: the child) to `set`. Only a
/// system call: safe between fork and exec.
pub(crate) fn set_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: sched_setaffinity reads the set it is pointed at, which lives
    // through the call, for the size given.
    let done = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

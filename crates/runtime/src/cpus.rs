//! CPU affinity, written once for the server's workers, the load generator's threads and ab's
//! processes: a set of CPUs checked when it is made, and pinning that says when it failed.

use std::io;

/// A set of CPUs to pin to.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The set of `cpus`: an error for a CPU the kernel's set cannot hold.
    pub fn new(cpus: &[usize]) -> io::Result<CpuSet> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in cpus {
            if cpu >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("CPU {cpu} is out of range"),
                ));
            }
            // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        Ok(CpuSet(set))
    }

    /// Pin the calling thread (and the threads and processes it starts after) to the set. Only
    /// one system call: safe between fork and exec (`CommandExt::pre_exec`).
    pub fn pin_current(&self) -> io::Result<()> {
        // SAFETY: the size given is the set's own; the kernel only reads it.
        if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&self.0), &self.0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The CPUs this process may run on (its affinity mask).
pub fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the size given is `set`'s own.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_an_allowed_cpu_holds_and_an_impossible_one_is_refused() {
        let cpus = allowed().unwrap();
        std::thread::spawn(move || {
            CpuSet::new(&cpus[..1]).unwrap().pin_current().unwrap();
            assert_eq!(allowed().unwrap(), cpus[..1]);
        })
        .join()
        .unwrap();
        assert!(CpuSet::new(&[libc::CPU_SETSIZE as usize]).is_err());
    }
}

//! Worker threads, as the server and the load generator both run them: one current-thread tokio
//! runtime per thread (nothing on the request path is shared or locked), with a `LocalSet` so
//! that tasks may hold `Rc` state, optionally pinned to one CPU; and their precise timer
//! (`timer`: a timerfd per thread, where tokio's timer rounds up to the next millisecond).

#[allow(unsafe_code)] // timerfd system calls
pub mod timer;

use std::future::Future;
use std::io;
use std::thread::JoinHandle;

/// Start a thread named `name`, pinned to `cpu` if given, and run the future that `make` builds
/// there to completion. The runtime is built before the thread starts, so that failing to build
/// it is an error here rather than a panic there.
pub fn spawn<F, Fut>(
    name: String,
    cpu: Option<usize>,
    make: F,
) -> io::Result<JoinHandle<Fut::Output>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future + 'static,
    Fut::Output: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new().name(name).spawn(move || {
        if let Some(cpu) = cpu {
            core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
        }
        tokio::task::LocalSet::new().block_on(&rt, make())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_local_tasks_on_its_own_thread() {
        let main = std::thread::current().id();
        let h = super::spawn("t".into(), None, move || async move {
            let rc = std::rc::Rc::new(5);
            let local = tokio::task::spawn_local(async move { *rc * 2 });
            (std::thread::current().id() != main, local.await.unwrap())
        })
        .unwrap();
        assert_eq!(h.join().unwrap(), (true, 10));
    }
}

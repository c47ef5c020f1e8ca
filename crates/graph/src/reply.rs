//! Replies produced in pieces: a command whose output can be large (`show ip fib` of a big
//! table) returns its first piece and leaves a [`Producer`] here when the caller said it can
//! stream ([`ReplyStream::allowed`], set by the CLI server around a top-level command); the
//! server asks the producer for the next piece whenever the client has read what was queued,
//! so the whole text is never held at once. Without `allowed` (a script line, the API's CLI
//! passthrough) commands build their whole output as before.

use crate::vlib::Vlib;

/// The next piece of a reply; `None` when it is complete.
pub type Producer = Box<dyn FnMut(&mut Vlib) -> Option<String> + Send>;

/// The streaming state of the command running now (a `Vlib` extension).
#[derive(Default)]
pub struct ReplyStream {
    /// The caller can send the reply in pieces.
    pub allowed: bool,
    /// Left by the command: produces the rest of its reply.
    pub producer: Option<Producer>,
}

/// Whether the running command may stream its reply.
pub fn allowed(vm: &Vlib) -> bool {
    vm.ext::<ReplyStream>().is_some_and(|r| r.allowed)
}

/// Leaves the producer of the rest of the reply (see the module doc).
pub fn set_producer(vm: &mut Vlib, p: Producer) {
    vm.ext_mut::<ReplyStream>().producer = Some(p);
}

/// Runs `f` with streaming set to `allowed`, restoring the previous setting after (a script
/// runs its lines with streaming off).
pub fn with_allowed<R>(vm: &mut Vlib, allowed: bool, f: impl FnOnce(&mut Vlib) -> R) -> R {
    let before = std::mem::replace(&mut vm.ext_mut::<ReplyStream>().allowed, allowed);
    let r = f(vm);
    vm.ext_mut::<ReplyStream>().allowed = before;
    r
}

/// Takes the producer the last command left, if any.
pub fn take_producer(vm: &mut Vlib) -> Option<Producer> {
    vm.ext_mut::<ReplyStream>().producer.take()
}

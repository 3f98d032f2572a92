//! Futures the delivery path awaits rarely.

/// A rarely run, large future (an AWS SDK call, a connect, a read of the sender's API), boxed
/// behind a vtable where it is awaited: a delivery's own future, which the runtime moves whole
/// at each step, then holds a pointer instead of its state, and its code is built once, at its
/// crate's level (the SDK's is optimised for size), rather than inlined into every caller.
pub(crate) fn rare<'a, T>(
    future: impl std::future::Future<Output = T> + Send + 'a,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>> {
    Box::pin(future)
}

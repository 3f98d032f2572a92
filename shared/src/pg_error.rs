//! What a tokio-postgres error says, read the same way everywhere: a data-free summary for a
//! log line, and whether it came from the socket or means the connection is gone. A leaf: the
//! database layer and the Rust effects' handle both read errors through it.

/// A failed statement, for logs: the SQLSTATE and constraint name (never the server's
/// message, which can quote values), or what went wrong on the socket.
pub(crate) fn statement_summary(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.constraint() {
            Some(c) => format!("sqlstate {} (constraint {c})", db.code().code()),
            None => format!("sqlstate {}", db.code().code()),
        },
        None if e.is_closed() => "connection closed".into(),
        None if io_error(e) => "connection error".into(),
        None => "a parameter could not be encoded".into(),
    }
}

/// True when the error came from the socket (an I/O error) rather than from the server.
pub(crate) fn io_error(e: &tokio_postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// True when TLS refused the server: a certificate the client does not trust, a host name the
/// certificate does not carry, a handshake rustls cannot complete. Waiting heals none of these.
pub(crate) fn tls_refused(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(error) = source {
        if error.is::<rustls::Error>() {
            return true;
        }
        source = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    false
}

/// True when the error says the connection is gone (closed, killed by an administrator or a
/// proxy, or the server restarting), as opposed to the statement failing.
pub(crate) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || code.starts_with("57P")
        }
        None => io_error(e),
    }
}

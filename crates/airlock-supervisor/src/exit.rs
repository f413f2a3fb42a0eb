use std::fmt;

/// How a worker process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitDescription {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Still running, or its end could not be observed.
    Unknown,
}

impl fmt::Display for ExitDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExitDescription::Code(c) => write!(f, "exited with status {c}"),
            ExitDescription::Signal(s) => write!(f, "killed by signal {s} ({})", signal_name(s)),
            ExitDescription::Unknown => f.write_str("exit status unknown"),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_signal() {
        assert_eq!(
            ExitDescription::Signal(9).to_string(),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(ExitDescription::Code(3).to_string(), "exited with status 3");
    }
}

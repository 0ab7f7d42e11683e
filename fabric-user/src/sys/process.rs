//! Other processes, as `/proc` shows them.

/// Process `pid`'s start time (clock ticks after boot, field 22 of `/proc/PID/stat`), if it
/// runs (a zombie, exited but not yet reaped, does not). With the pid it names one process:
/// a pid can be used again, a pid and start time cannot.
pub fn start_time(pid: u32) -> Option<u64> {
    parse_stat_start(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time in a `/proc/PID/stat` line, unless the process is a zombie. The command
/// name (field 2) is in parentheses and may itself hold spaces and parentheses: the fields
/// are counted from its last `)`.
fn parse_stat_start(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(") ")?.1;
    let mut fields = rest.split_ascii_whitespace();
    // `rest` starts at field 3, the state.
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(22 - 4)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_after_any_command_name() {
        let line = |comm: &str, state: &str| {
            format!("4242 ({comm}) {state} 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 12345 67")
        };
        assert_eq!(parse_stat_start(&line("fabric", "S")), Some(987654));
        assert_eq!(parse_stat_start(&line("a) (b) c", "R")), Some(987654));
        assert_eq!(parse_stat_start(&line("fabric", "Z")), None);
        assert_eq!(parse_stat_start("4242 (fabric) S 1 2"), None);
        assert_eq!(parse_stat_start("garbage"), None);
    }

    #[test]
    fn this_process_has_a_start_time_and_a_pid_beyond_any_has_none() {
        assert!(start_time(std::process::id()).is_some());
        // Above the kernel's limit on pids (2^22).
        assert_eq!(start_time(1 << 23), None);
    }
}

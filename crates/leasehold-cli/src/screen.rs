//! Live views on a terminal: a block of lines redrawn in place, with the
//! cursor hidden while it is drawn and shown again when the view is dropped
//! (also on Ctrl-C, which ends the views through the normal return path).

use std::io::{self, Write};

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";
const CLEAR_TO_END: &str = "\x1b[J";

/// Standard output is a terminal.
pub(crate) fn stdout_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDOUT_FILENO) == 1 }
}

/// A block of lines at the bottom of the terminal, redrawn in place.
#[derive(Debug)]
pub(crate) struct LiveView {
    drawn: usize,
}

impl LiveView {
    pub(crate) fn start() -> io::Result<Self> {
        let mut out = io::stdout().lock();
        out.write_all(HIDE_CURSOR.as_bytes())?;
        out.flush()?;
        Ok(LiveView { drawn: 0 })
    }

    /// Replaces what was drawn last with `lines`. Lines are cut to the
    /// terminal's width: a wrapped line would throw off the next redraw.
    pub(crate) fn draw(&mut self, lines: &[String]) -> io::Result<()> {
        let width = width().saturating_sub(1).max(20);
        let mut frame = String::new();
        if self.drawn > 0 {
            frame.push_str(&format!("\r\x1b[{}A", self.drawn));
        }
        frame.push_str(CLEAR_TO_END);
        for line in lines {
            frame.push_str(fit(line, width));
            frame.push('\n');
        }
        let mut out = io::stdout().lock();
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        self.drawn = lines.len();
        Ok(())
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        let mut out = io::stdout().lock();
        let _ = out.write_all(SHOW_CURSOR.as_bytes());
        let _ = out.flush();
    }
}

/// `text` cut to at most `columns` columns of a terminal, by the columns
/// each character takes there (two for most CJK characters, none for a
/// combining mark), never inside a character.
pub(crate) fn fit(text: &str, columns: usize) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += c.width().unwrap_or(0);
        if used > columns {
            return &text[..at];
        }
    }
    text
}

/// `text` followed by spaces up to `columns` columns of a terminal.
pub(crate) fn pad(text: &str, columns: usize) -> String {
    let fill = columns.saturating_sub(text.width());
    format!("{text}{}", " ".repeat(fill))
}

/// The terminal's width in columns (80 when it will not say).
pub(crate) fn width() -> usize {
    // SAFETY: TIOCGWINSZ writes only into `size`, which lives on this stack.
    unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) == 0 && size.ws_col > 0 {
            usize::from(size.ws_col)
        } else {
            80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_to_the_columns_they_take() {
        assert_eq!(fit("lock", 10), "lock");
        assert_eq!(fit("lock held", 4), "lock");
        // Two columns each.
        assert_eq!(fit("锁锁锁 held", 4), "锁锁");
        assert_eq!(fit("锁锁锁 held", 5), "锁锁");
        // Nothing of a character that would overrun.
        assert_eq!(fit("a锁", 2), "a");
        // A combining accent takes none.
        assert_eq!(fit("e\u{301}tat", 2), "e\u{301}t");
    }

    #[test]
    fn padding_counts_columns() {
        assert_eq!(pad("job", 5), "job  ");
        assert_eq!(pad("锁锁", 5), "锁锁 ");
        assert_eq!(pad("é", 2), "é ");
        assert_eq!(pad("longer", 2), "longer");
    }
}

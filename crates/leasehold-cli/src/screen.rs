//! Live views on a terminal: a block of lines redrawn in place, with the
//! cursor hidden while it is drawn and shown again when the view is dropped
//! (also on Ctrl-C, which ends the views through the normal return path).

use std::io::{self, Write};

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
            frame.extend(line.chars().take(width));
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

fn width() -> usize {
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

//! The file-descriptor tee: a process's stdout or stderr is pointed at a pipe (or a
//! pseudo-terminal when it was a terminal, so programs still see one), and a reader thread
//! writes every byte on to where the stream went before and hands it to the capture.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One redirected stream: the descriptor it had before (kept to restore it and to write the
/// output on to), and the end the reader thread reads.
pub struct Redirected {
    pub fd: RawFd,
    pub saved: OwnedFd,
    pub read_end: OwnedFd,
    /// What `fd` was pointed at (device and inode), to tell at the end whether it still is.
    pub pointed_at: Option<(u64, u64)>,
}

/// The device and inode `fd` refers to.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: fstat fills a plain C struct for a descriptor this process owns.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev as u64, st.st_ino as u64))
    }
}

fn check(ret: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(ret)
}

fn close_on_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns, with integer arguments only.
    unsafe { check(libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC), "fcntl")? };
    Ok(())
}

/// A pseudo-terminal like the terminal `like`, with output passed through as written (no
/// newline translation), answering (reading end, writing end).
fn pty_like(like: RawFd) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: termios and winsize are plain C structs that tcgetattr and ioctl fill in; openpty
    // writes two descriptors into the integers given and reads the structs.
    unsafe {
        let mut term: libc::termios = std::mem::zeroed();
        check(libc::tcgetattr(like, &mut term), "tcgetattr")?;
        term.c_oflag &= !libc::OPOST;
        let mut size: libc::winsize = std::mem::zeroed();
        let has_size = libc::ioctl(like, libc::TIOCGWINSZ, &mut size) == 0;
        let (mut master, mut slave) = (-1, -1);
        let size_ptr = if has_size { &size as *const libc::winsize } else { std::ptr::null() };
        check(
            libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), &term as *const _ as _, size_ptr as _),
            "openpty",
        )?;
        let (master, slave) = (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave));
        close_on_exec(master.as_raw_fd())?;
        close_on_exec(slave.as_raw_fd())?;
        Ok((master, slave))
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe writes two new descriptors into the array.
    unsafe {
        check(libc::pipe(fds.as_mut_ptr()), "pipe")?;
        let (r, w) = (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]));
        close_on_exec(r.as_raw_fd())?;
        close_on_exec(w.as_raw_fd())?;
        Ok((r, w))
    }
}

/// Points `fd` at a new pipe or pseudo-terminal. Children started later inherit the new `fd`
/// (it is not close-on-exec), so what they print is captured too.
pub fn redirect(fd: RawFd) -> io::Result<Redirected> {
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor that this process then owns.
    let saved = unsafe { OwnedFd::from_raw_fd(check(libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3), "dup")?) };
    // SAFETY: isatty only reads the descriptor's kind.
    let terminal = unsafe { libc::isatty(saved.as_raw_fd()) } == 1;
    let (read_end, write_end) = match terminal.then(|| pty_like(saved.as_raw_fd())) {
        Some(Ok(ends)) => ends,
        _ => pipe()?,
    };
    // SAFETY: dup2 replaces `fd` with a copy of a descriptor this process owns.
    unsafe { check(libc::dup2(write_end.as_raw_fd(), fd), "dup2")? };
    Ok(Redirected { fd, saved, read_end, pointed_at: identity(write_end.as_raw_fd()) })
}

/// Points `fd` back where it went before, flushing C's stdio buffers first so nothing printed
/// through them is left behind. When something else pointed `fd` elsewhere since (a test
/// runner capturing output), it is left where that put it.
pub fn restore(r: &Redirected) {
    // SAFETY: fflush(NULL) flushes every C stdio stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    if r.pointed_at.is_some() && identity(r.fd) != r.pointed_at {
        return;
    }
    // SAFETY: dup2 on descriptors this process owns.
    unsafe { libc::dup2(r.saved.as_raw_fd(), r.fd) };
}

/// Reads what the process printed into `buf`: the bytes read, or 0 once every writer is gone.
pub fn read(fd: RawFd, buf: &mut [u8]) -> usize {
    loop {
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return n as usize;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // EIO: a pseudo-terminal whose every writer closed.
            return 0;
        }
    }
}

/// Writes all of `bytes` to `fd`; false once it cannot (the terminal is gone).
pub fn write_all(fd: RawFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

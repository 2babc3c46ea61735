package main

import (
	"os"
	"syscall"
	"unsafe"
)

// terminalForeground reports whether our process group is the foreground
// group of our controlling terminal, i.e. whether a Ctrl-C typed there is
// delivered to us and to the command we run alike.
func terminalForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer func() { _ = tty.Close() }()
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}

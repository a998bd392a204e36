// Command probe is a static helper that the vm-tests copy into nodes (the
// node root file system has no curl or nc).
//
//	probe dial ADDR MSG  connect over TCP, send MSG and a newline, print the reply line
//	probe lock FILE      take a non-blocking exclusive flock on FILE, print "locked",
//	                     hold it until standard input closes; exit 3 if it is held
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 4 && len(os.Args) != 3 {
		usage()
	}
	var err error
	switch {
	case os.Args[1] == "dial" && len(os.Args) == 4:
		err = dial(os.Args[2], os.Args[3])
	case os.Args[1] == "lock" && len(os.Args) == 3:
		err = lock(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe dial ADDR MSG | probe lock FILE")
	os.Exit(2)
}

func dial(addr, msg string) error {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, msg); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	fmt.Print(reply)
	return nil
}

func lock(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintln(os.Stderr, "probe: lock held:", err)
		os.Exit(3)
	}
	fmt.Println("locked")
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

//go:build linux

package vmtests

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Runs reports whether the process at the other end of c, a connection a
// Proxy accepted on the host's loopback, runs inside node n: the nodes
// share the host's network, so only the socket's owner tells them apart.
// It finds the client's socket in /proc/net/tcp by its port, the process
// holding it, and that process's cgroup, which is the node's.
func (n *Node) Runs(c net.Conn) bool {
	addr, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	inode := socketInode(addr.Port, c.LocalAddr().(*net.TCPAddr).Port)
	if inode == "" {
		return false
	}
	pid := socketOwner(inode)
	if pid == "" {
		return false
	}
	data, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == "/"+n.Name || strings.HasPrefix(parts[2], "/"+n.Name+"/")) {
			return true
		}
	}
	return false
}

// socketInode is the inode of the loopback TCP socket whose local port is
// port and remote port is remote, from /proc/net/tcp.
func socketInode(port, remote int) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	local, rem := fmt.Sprintf(":%04X", port), fmt.Sprintf(":%04X", remote)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && strings.HasSuffix(fields[1], local) && strings.HasSuffix(fields[2], rem) {
			return fields[9]
		}
	}
	return ""
}

// socketOwner is a process holding the socket with inode.
func socketOwner(inode string) string {
	want := "socket:[" + inode + "]"
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == want {
			return strings.Split(fd, "/")[2]
		}
	}
	return ""
}

// Package vmtests is the multi-node test harness of unitlease: it boots
// Debian 12 systemd-nspawn containers ("nodes") with systemd as PID 1 on one
// host, runs commands inside them, cuts their power and reboots them.
//
// The harness needs root, systemd-nspawn (systemd-container), nsenter
// (util-linux) and, to build the cached root file system once, debootstrap.
// See README.md in this directory for how to run the tests and how teardown
// works.
package vmtests

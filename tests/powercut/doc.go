// Package powercut is make power-check: the gateway under real power cuts,
// which lose what a kill -9 leaves behind, the kernel's page cache. Two
// levels (docs/power.md):
//
//   - the lossy level: the field build as a process on [LossyFS], a FUSE
//     filesystem that keeps every write not yet fsynced in memory and
//     throws it away at the cut, as LazyFS does; hundreds of cuts a minute;
//   - the VM level: the field build as the daemon of a qemu VM booting
//     Debian's own kernel, its buffer on ext4 on a virtio disk, the cut a
//     SIGKILL of qemu with the guest's dirty pages still in its memory.
//
// Devices and broker stay on the host, outside the power domain. Each level
// runs again with the buffer's fsync off (FIELDLINK_UNSAFE_NOSYNC=1), and
// must then see losses: the control that shows the test can fail.
//
// The levels' tests are behind the powercut build tag; LossyFS's own test
// is not.
package powercut

package redislease

// ACL returns a redis.conf `user` line granting exactly what unitlease
// needs under prefix: read and write its lease keys (only through the
// scripts, in practice), publish and subscribe on its events channels
// (the nodes' announcements among them: PUBSUB NUMSUB and CHANNELS read
// them), list its keys for `status`, delete a lease's disabled marker
// (`unitlease enable`), read INFO (the identity of every answer, and the
// persistence settings for `check`), and read the server's clock (TIME,
// in the acquire and reset scripts: the version floor). Not CONFIG GET:
// it reads every setting, the default user's password included. A
// Sentinel setup needs it on the data servers (AllowConfigGet).
// The password is stored as given; in production use ACL SETUSER with a
// #<sha256> hash instead (see the README).
func ACL(user, password, prefix string) string {
	return "user " + user + " on >" + password + " resetchannels ~" + prefix + "* &" + prefix + "events:* " +
		"-@all +get +set +mget +type +strlen +getrange +scan +publish +subscribe +unsubscribe +pubsub|numsub +pubsub|channels +evalsha +eval +script|load +del " +
		"+ping +time +info"
}

// AllowConfigGet is what a Sentinel setup adds to ACL's user on every data
// server: `check` and `run` read min-replicas-to-write and
// min-replicas-max-lag with CONFIG GET, which lets the user read every
// setting (give the default user a password nothing else shares).
const AllowConfigGet = " +config|get"

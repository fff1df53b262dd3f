-- Leadership granted by another lease store (a Kubernetes Lease): a new fencing token
-- for the leader that store just elected, by the rule of leader_acquire (`new_token`,
-- leader.lua). Every leader-only write of an older token is refused from here on.
-- P = {}
return cjson.encode({ r = { t = new_token() } })

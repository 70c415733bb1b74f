package lsm

import "sync"

// condVar is a sync.Cond bound to d.mu, kept per writer so that a group
// leader wakes exactly the writers it finished.
type condVar struct{ c sync.Cond }

func (c *condVar) init(l sync.Locker) { c.c.L = l }
func (c *condVar) wait()              { c.c.Wait() }
func (c *condVar) signal()            { c.c.Signal() }

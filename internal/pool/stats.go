package pool

// Stats is what the pool holds now, for metrics.
type Stats struct {
	Warm     int // parked entries
	Awaiting int // of which parked waiting for approval
	Capacity int // Max
}

// Stats reports the pool's occupancy.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Warm: len(p.entries), Capacity: p.cfg.Max}
	for _, e := range p.entries {
		if e.awaiting {
			s.Awaiting++
		}
	}
	return s
}

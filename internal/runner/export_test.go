package runner

// Hubs is how many sessions keep a hub of followers now.
func (s *Service) Hubs() int {
	s.hubs.mu.Lock()
	defer s.hubs.mu.Unlock()
	return len(s.hubs.m)
}

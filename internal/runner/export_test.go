package runner

// Hubs is how many sessions keep a hub of followers now.
func (s *Service) Hubs() int { return s.hubs.Len() }

package cardstore

import (
	"errors"
)

// errNoCard answers the aux calls while the card's buffer is not open.
var errNoCard = errors.New("buffer: the card's buffer is not open (the card failed)")

// Aux reads a key of the card's aux state.
func (s *Store) Aux(key string) ([]byte, error) {
	if c := s.Card(); c != nil {
		return c.Aux(key)
	}
	return nil, errNoCard
}

// ScanAux reads the card's aux keys under prefix.
func (s *Store) ScanAux(prefix string, fn func(key string, value []byte) error) error {
	if c := s.Card(); c != nil {
		return c.ScanAux(prefix, fn)
	}
	return errNoCard
}

// UpdateAux sets and deletes aux keys on the card.
func (s *Store) UpdateAux(put map[string][]byte, del []string) error {
	if c := s.Card(); c != nil {
		return c.UpdateAux(put, del)
	}
	return errNoCard
}

// PutAux sets an aux key on the card.
func (s *Store) PutAux(key string, value []byte) error {
	if c := s.Card(); c != nil {
		return c.PutAux(key, value)
	}
	return errNoCard
}

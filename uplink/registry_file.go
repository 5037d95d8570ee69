package uplink

import (
	"fmt"
	"os"
	"path/filepath"
)

// LoadRegistryList reads the registry list saved by [SaveRegistryList]. A
// missing file is no list and no error.
func LoadRegistryList(path string) ([]RegistryUpstream, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	list, err := parseRegistry(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return list, nil
}

// SaveRegistryList keeps a registry's last good answer (its [Registry.Raw])
// at path, so that a gateway restarting without network still knows its
// upstreams. The file is replaced atomically: a power cut leaves the old
// list or the new one, never half of one.
func SaveRegistryList(path string, raw []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

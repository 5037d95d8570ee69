package uplink

// SiteUpstream is one upstream of the site file as the kinds check it: the
// settings a kind owns or refuses. A kind's check may fill in Topic's
// default; the loader keeps what it fills.
type SiteUpstream struct {
	URL string
	// Known says the URL is valid and of a registered kind; an upstream
	// whose URL is not has that error already.
	Known       bool
	Encoding    Encoding
	Topic       string
	Username    string
	TokenFile   string
	HeadersFile string
	LoadTopic   string
	// Sparkplug is the upstream's sparkplug settings, nil when it has none
	// (edge_node's default already filled in).
	Sparkplug *SiteSparkplug
}

// SiteSparkplug is an upstream's sparkplug settings.
type SiteSparkplug struct {
	GroupID, EdgeNode, PrimaryHost string
}

// SiteFile is what a kind's check of the site file reports to and reads
// through, so that its messages say file, line and field as the loader's
// own.
type SiteFile interface {
	// Errorf reports an error against field, a path under the upstream
	// ("token_file", "sparkplug.group_id").
	Errorf(field, format string, args ...any)
	// Path resolves a path the site file gives against the site file's
	// directory.
	Path(p string) string
	// Readable says why the file at path cannot be read; nil when it can.
	Readable(path string) error
}

// Kinds is every registered kind, in the order they were registered.
func Kinds() []Kind {
	kinds.RLock()
	defer kinds.RUnlock()
	var ks []Kind
	for _, e := range kinds.list {
		ks = append(ks, e.kind)
	}
	return ks
}

// KindOf is the kind of the upstreams with the URL raw and the encoding
// enc, as [Register] sets it.
func KindOf(raw string, enc Encoding) (Kind, error) { return kindOfURL(raw, enc) }

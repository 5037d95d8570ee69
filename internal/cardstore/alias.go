// Package cardstore is the old path of [cardstore.Store], now in
// fieldlink/buffer/cardstore beside the card's buffer it falls back from.
// It names the one type a caller still reaches it by (agent/uplink.go) and
// goes once that caller imports buffer/cardstore.
package cardstore

import "fieldlink/buffer/cardstore"

// Store is [cardstore.Store].
type Store = cardstore.Store

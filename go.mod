module fieldlink

go 1.26

require (
	github.com/goburrow/modbus v0.1.0
	go.bug.st/serial v1.8.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/goburrow/serial v0.1.0 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"fieldlink/sensors/modbus"
	"fieldlink/sensors/modbus/spec"
	"fieldlink/sensors/profile"
	"fieldlink/sensors/scan"
)

func cmdRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("read", stderr)
	rawURL := fs.String("url", "", "bus URL: rtu:///dev/ttyUSB0?baud=9600&parity=N, tcp://host:502, rtuovertcp://host:port")
	slave := fs.Int("slave", 1, "slave id (1-247)")
	areaName := fs.String("area", "holding", "holding, input, coil or discrete")
	address := fs.Int("address", 0, "first address, zero-based (register 40001 is address 0)")
	count := fs.Int("count", 1, "number of values to read")
	typeName := fs.String("type", "", "value type: int16 uint16 int32 uint32 int64 uint64 float32 float64 bool string (default uint16, bool for bits)")
	orderName := fs.String("order", "ABCD", "byte order of multi-register values: ABCD, CDAB, BADC, DCBA")
	length := fs.Int("length", 0, "registers per string (type string)")
	timeout := fs.Duration("timeout", time.Second, "reply timeout")
	if err := parse(fs, args); err != nil {
		return err
	}
	reg := profile.Register{Length: *length}
	var errs []string
	if err := reg.Area.UnmarshalText([]byte(*areaName)); err != nil {
		errs = append(errs, "-area: "+err.Error())
	}
	if *typeName == "" {
		*typeName = "uint16"
		if reg.Area.IsBit() {
			*typeName = "bool"
		}
	}
	if err := reg.Type.UnmarshalText([]byte(*typeName)); err != nil {
		errs = append(errs, "-type: "+err.Error())
	}
	if err := reg.Order.UnmarshalText([]byte(*orderName)); err != nil {
		errs = append(errs, "-order: "+err.Error())
	}
	if *slave < 0 || *slave > 247 {
		errs = append(errs, fmt.Sprintf("-slave: must be 0..247, got %d", *slave))
	}
	if *address < 0 || *address > 65535 {
		errs = append(errs, fmt.Sprintf("-address: must be 0..65535, got %d", *address))
	}
	if reg.Type == profile.String && *length < 1 {
		errs = append(errs, "-length: give the registers per string")
	}
	if reg.Area.IsBit() && reg.Type != profile.Bool {
		errs = append(errs, "-type: coils and discrete inputs are bool")
	}
	words := max(reg.Words(), 1)
	limit := spec.MaxReadRegisters
	if reg.Area.IsBit() {
		limit = spec.MaxReadBits
	}
	if *count < 1 || *count*words > limit {
		errs = append(errs, fmt.Sprintf("-count: %d values of %d words do not fit one request (max %d)", *count, words, limit))
	}
	if *rawURL == "" {
		errs = append(errs, "-url: give the bus URL")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	client, err := modbus.Open(*rawURL, modbus.Options{Timeout: *timeout})
	if err != nil {
		return err
	}
	defer client.Close()
	qty := *count * words
	data, err := client.Read(ctx, byte(*slave), reg.Area.FunctionCode(), uint16(*address), uint16(qty))
	if err != nil {
		return err
	}
	for i := range *count {
		addr := *address + i*words
		if reg.Area.IsBit() {
			fmt.Fprintf(stdout, "[%d]: %v\n", addr, data[i/8]&(1<<(i%8)) != 0)
			continue
		}
		reg.Address = uint16(addr)
		v := reg.Decode(data[2*i*words : 2*(i+1)*words])
		fmt.Fprintf(stdout, "[%d]: %s\n", addr, v)
	}
	return nil
}

func cmdScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("scan", stderr)
	rawURL := fs.String("url", "", "bus URL (the baud in it is replaced by each of -bauds on a serial line)")
	slaves := fs.String("slaves", "1-247", "slave ids to try: ranges and lists, e.g. 1-10,32")
	bauds := fs.String("bauds", "9600,4800,19200,2400,38400,115200", "baud rates to try on a serial line")
	timeout := fs.Duration("timeout", 0, "reply timeout per try; 0 is 100ms plus the frames' time on the wire at each baud (124ms at 9600 8N1, 195ms at 2400)")
	areaName := fs.String("area", "holding", "area to probe: holding or input")
	address := fs.Int("address", 0, "address to probe")
	profilesDir := fs.String("profiles", "", "a directory of extra *.yaml profiles to match the devices found against")
	identify := fs.Bool("identify", true, "ask each device found what it is (function 43/14) and match it and its registers against the profiles")
	if err := parse(fs, args); err != nil {
		return err
	}
	set, err := loadProfiles(*profilesDir)
	if err != nil {
		return fmt.Errorf("-profiles: %w", err)
	}
	ids, err := scan.ParseIDs(*slaves)
	if err != nil {
		return fmt.Errorf("-slaves: %v", err)
	}
	var area profile.Area
	if err := area.UnmarshalText([]byte(*areaName)); err != nil || area.IsBit() {
		return fmt.Errorf("-area: must be holding or input")
	}
	err = scan.Run(ctx, scan.Options{
		URL: *rawURL, Bauds: *bauds, IDs: ids, Timeout: *timeout, Area: area, Address: uint16(*address),
		Identify: *identify, Profiles: set, Out: stdout, Log: stderr,
	})
	if errors.Is(err, scan.ErrStopped) {
		return errSilent
	}
	return err
}

package config

import (
	"net"
	"strconv"
)

// listenAddr reads an optional host:port to listen on ("" when unset).
func (l *loader) listenAddr(k string) string {
	v := l.str(k, "")
	if v == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(v)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n < 0 || n > 65535 {
		l.fail(k + "=" + strconv.Quote(v) + " is not a listen address; use host:port, e.g. 0.0.0.0:9464 or :9464")
		return ""
	}
	return v
}

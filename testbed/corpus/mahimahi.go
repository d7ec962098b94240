package corpus

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// A Mahimahi recording folder (mm-webrecord, Netravali et al., USENIX ATC
// 2015) holds one file per request/response pair, each a serialized
// MahimahiProtobufs.RequestResponse (mahimahi protobufs/http_record.proto):
//
//	message HTTPHeader      { optional bytes key = 1; optional bytes value = 2; }
//	message HTTPMessage     { optional bytes first_line = 1; repeated HTTPHeader header = 2; optional bytes body = 3; }
//	message RequestResponse { optional string ip = 1; optional uint32 port = 2;
//	                          optional Scheme scheme = 3; /* HTTP = 1, HTTPS = 2 */
//	                          optional HTTPMessage request = 4; optional HTTPMessage response = 5; }
//
// The body is kept as it crossed the wire (chunked framing included), as
// mm-webreplay serves it. The messages are decoded with protowire, the Go
// protobuf module's wire-format reader; the schema is five fields deep, so
// no generated code.
const (
	mmSchemeHTTPS = 2
)

// mmMessage is a decoded HTTPMessage.
type mmMessage struct {
	firstLine string
	header    [][2]string
	body      []byte
}

// mmRecord is a decoded RequestResponse.
type mmRecord struct {
	ip       string
	port     uint64
	scheme   uint64
	request  mmMessage
	response mmMessage
}

var errNotMahimahi = errors.New("not a Mahimahi RequestResponse")

// decodeMahimahi decodes one RequestResponse; it fails on anything that is
// not well-formed protobuf of that shape or lacks a request and response.
func decodeMahimahi(b []byte) (*mmRecord, error) {
	r := &mmRecord{}
	var haveReq, haveResp bool
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.ip = string(v)
		case num == 2 && typ == protowire.VarintType:
			r.port = n
		case num == 3 && typ == protowire.VarintType:
			r.scheme = n
		case (num == 4 || num == 5) && typ == protowire.BytesType:
			m, err := decodeMMMessage(v)
			if err != nil {
				return err
			}
			if num == 4 {
				r.request, haveReq = m, true
			} else {
				r.response, haveResp = m, true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !haveReq || !haveResp || !strings.HasPrefix(r.response.firstLine, "HTTP/") {
		return nil, errNotMahimahi
	}
	return r, nil
}

func decodeMMMessage(b []byte) (mmMessage, error) {
	var m mmMessage
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			m.firstLine = string(v)
		case 2:
			var kv [2]string
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ == protowire.BytesType && (num == 1 || num == 2) {
					kv[num-1] = string(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			m.header = append(m.header, kv)
		case 3:
			m.body = v
		}
		return nil
	})
	return m, err
}

// eachField calls f for every field of a protobuf message: v is a
// length-delimited field's bytes, n a varint's value.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errNotMahimahi
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return errNotMahimahi
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// IsMahimahiDir reports whether dir holds at least one Mahimahi record
// among its first 16 regular files.
func IsMahimahiDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	tried := 0
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if tried++; tried > 16 {
			return false
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return false
		}
		if _, err := decodeMahimahi(b); err == nil {
			return true
		}
	}
	return false
}

// LoadMahimahi imports Mahimahi recording folders (mm-webrecord output):
// dir itself when it holds records, else each of its subfolders, one page
// per folder. A record's response becomes an object (framed as
// parseHTTPResponse reads it, with the same repairs); the page is the
// folder's HTML 200 response whose request had no Referer (a navigation),
// the first by URL when there are several. Files that do not decode are
// skipped and counted ("not_mahimahi_record"), as are records without an
// http(s) URL.
func LoadMahimahi(dir string) (*Corpus, error) {
	folders := []string{dir}
	if !IsMahimahiDir(dir) {
		folders = nil
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && IsMahimahiDir(filepath.Join(dir, e.Name())) {
				folders = append(folders, filepath.Join(dir, e.Name()))
			}
		}
	}
	if len(folders) == 0 {
		return nil, fmt.Errorf("corpus: %q holds no Mahimahi recording", dir)
	}
	stats := ImportStats{SkippedBy: map[string]int{}, Repaired: map[string]int{}}
	skip := func(reason string) { stats.Skipped++; stats.SkippedBy[reason]++ }
	var pages []*Page
	for _, folder := range folders {
		ents, err := os.ReadDir(folder)
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		var objs []*Object
		var navs []string
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(folder, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("corpus: %w", err)
			}
			stats.Records++
			r, err := decodeMahimahi(b)
			if err != nil {
				skip("not_mahimahi_record")
				continue
			}
			stats.Responses++
			o, u, reason, repairs := mmObject(r)
			if !stats.take(o, reason, repairs) {
				continue
			}
			stats.ResponsesUsed++
			objs = append(objs, o)
			if o.Status == 200 && strings.HasPrefix(o.ContentType, "text/html") && mmHeader(r.request, "Referer") == "" {
				navs = append(navs, u)
			}
		}
		if len(objs) == 0 {
			continue
		}
		if len(navs) == 0 {
			skip("folder_without_navigation")
			continue
		}
		sort.Strings(navs)
		pu, _ := url.Parse(navs[0])
		pages = append(pages, &Page{Name: filepath.Base(folder), URL: navs[0], Host: normHost(pu.Host), Objects: objs})
	}
	if len(pages) == 0 {
		return nil, fmt.Errorf("corpus: %s: no page (an HTML response to a request without Referer): %s", dir, countList(stats.SkippedBy))
	}
	return New(dir, pages, stats), nil
}

func mmHeader(m mmMessage, name string) string {
	for _, kv := range m.header {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

// mmObject turns a record into an object and its URL (scheme from the
// record, host from the request's Host header, target from its request
// line).
func mmObject(r *mmRecord) (*Object, string, string, []Repair) {
	parts := strings.Fields(r.request.firstLine)
	host := mmHeader(r.request, "Host")
	if len(parts) < 2 || host == "" {
		return nil, "", SkipNotHTTPTarget, nil
	}
	scheme := "http"
	if r.scheme == mmSchemeHTTPS {
		scheme = "https"
	}
	target := parts[1]
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		if u, err := url.Parse(target); err == nil {
			target = targetPath(u)
		}
	}
	u, err := url.Parse(scheme + "://" + host + target)
	if err != nil || u.Host == "" {
		return nil, "", SkipNotHTTPTarget, nil
	}
	var block strings.Builder
	block.WriteString(r.response.firstLine + "\r\n")
	for _, kv := range r.response.header {
		block.WriteString(kv[0] + ": " + kv[1] + "\r\n")
	}
	block.WriteString("\r\n")
	block.Write(r.response.body)
	p, err := parseHTTPResponse([]byte(block.String()))
	if err != nil {
		return nil, "", SkipBadHTTPHead, nil
	}
	if p.status < 200 {
		return nil, "", SkipInformational, p.repairs
	}
	if p.status == 304 {
		return nil, "", SkipNotModified, p.repairs
	}
	o := &Object{Host: normHost(u.Host), Path: targetPath(u), Scheme: scheme, Body: p.body, Status: p.status, Header: p.header}
	for _, h := range hopByHop {
		o.Header.Del(h)
	}
	o.ContentType = o.Header.Get("Content-Type")
	if o.ContentType == "" {
		o.ContentType = ContentType(u.Path, p.body)
	}
	return o, u.String(), "", p.repairs
}

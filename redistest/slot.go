package redistest

import "strings"

// NumSlots is the number of hash slots in a Redis Cluster.
const NumSlots = 16384

// Slot returns the Redis Cluster hash slot of key, in [0, NumSlots): CRC16
// (the XMODEM variant) of the key modulo 16384. If the key holds a hash tag,
// a '{' followed later by a '}' with at least one byte between the first '{'
// and the first '}' after it, only the tag is hashed, so "{user1}:a" and
// "{user1}:b" share a slot. It equals CLUSTER KEYSLOT.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) % NumSlots
}

// crc16 is CRC-16/XMODEM: polynomial 0x1021, initial value 0, no reflection.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

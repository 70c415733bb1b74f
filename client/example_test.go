package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/cairnkv/cairn/client"
)

// Connect, write a key and read it back.
func Example() {
	c, err := client.New(client.Config{
		Endpoints: []string{exampleEndpoint()}, // e.g. "10.0.0.1:7379", "10.0.0.2:7379"
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, []byte("greeting"), []byte("hello")); err != nil {
		log.Fatal(err)
	}
	kv, err := c.Get(ctx, []byte("greeting"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s = %s (version %d)\n", kv.Key, kv.Value, kv.Version)
	// Output: greeting = hello (version 1)
}

// Missing keys, bad arguments and an unreachable cluster are told apart
// with errors.Is.
func Example_errors() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	_, err = c.Get(ctx, []byte("no such key"))
	fmt.Println(errors.Is(err, client.ErrNotFound))

	_, err = c.Put(ctx, []byte(""), []byte("empty keys are refused"))
	fmt.Println(errors.Is(err, client.ErrInvalidArgument), err)

	// Retries end at the context's deadline.
	down, _ := client.New(client.Config{Endpoints: []string{"127.0.0.1:1"}})
	defer down.Close()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = down.Get(short, []byte("k"))
	fmt.Println(errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true
	// true cairn: put "": invalid argument: empty key
	// true true
}

// Scan iterates over a range or a prefix, fetching pages as needed.
func ExampleClient_Scan() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, name := range []string{"ada", "grace", "barbara"} {
		if _, err := c.Put(ctx, []byte("users/"+name), []byte(name)); err != nil {
			log.Fatal(err)
		}
	}

	it := c.Scan(ctx, nil, nil, client.WithPrefix([]byte("users/")), client.WithLimit(10))
	defer it.Close()
	for it.Next() {
		fmt.Printf("%s\n", it.KeyValue().Key)
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// users/ada
	// users/barbara
	// users/grace
}

// A transaction moves money between two accounts only if the source has
// not changed since it was read.
func ExampleClient_Txn() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	from, to := []byte("acct/alice"), []byte("acct/bob")
	c.Put(ctx, from, []byte("100"))
	c.Put(ctx, to, []byte("0"))

	src, err := c.Get(ctx, from)
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Txn(ctx).
		If(client.ModIndex(from).Equal(src.ModIndex)).
		Then(client.OpPut(from, []byte("70")), client.OpPut(to, []byte("30"))).
		Else(client.OpGet(from)).
		Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("moved:", res.Succeeded)
	// Output: moved: true
}

// CompareAndSwap updates a key only if it still holds the expected value.
func ExampleClient_CompareAndSwap() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	lock := []byte("locks/report")

	// nil as the old value: take the lock only if nobody holds it.
	fmt.Println(c.CompareAndSwap(ctx, lock, nil, []byte("worker-1")))
	err = c.CompareAndSwap(ctx, lock, nil, []byte("worker-2"))
	fmt.Println(errors.Is(err, client.ErrCompareFailed))
	fmt.Println(c.CompareAndSwap(ctx, lock, []byte("worker-1"), []byte("worker-2")))
	// Output:
	// <nil>
	// true
	// <nil>
}

// Serializable reads are served by any node from its local state: cheaper,
// possibly stale.
func ExampleWithConsistency() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	c.Put(ctx, []byte("config/mode"), []byte("fast"))

	kv, err := c.Get(ctx, []byte("config/mode"), client.WithConsistency(client.Serializable))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", kv.Value)
	// Output: fast
}

// Backup copies a consistent snapshot of a node's data into a file (here
// a buffer); VerifyBackup checks one.
func ExampleClient_Backup() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	c.Put(ctx, []byte("backup/k"), []byte("v"))

	var file bytes.Buffer // os.Create("cairn.backup") in a real program
	info, err := c.Backup(ctx, &file)
	if err != nil {
		log.Fatal(err)
	}
	checked, err := client.VerifyBackup(&file)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(checked.AppliedIndex == info.AppliedIndex, len(checked.Files) > 0)
	// Output: true true
}

// Status describes a node, including its storage engine's shape.
func ExampleClient_Status() {
	c, err := client.New(client.Config{Endpoints: []string{exampleEndpoint()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.GetNodeId(), st.GetState(), "leader:", st.GetLeaderId())
	for _, l := range st.GetEngine().GetLevels() {
		fmt.Printf("L%d: %d files, %d bytes\n", l.GetLevel(), l.GetNumFiles(), l.GetSizeBytes())
	}
}
